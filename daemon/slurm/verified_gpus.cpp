#include "slurm/verified_gpus.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dirs/runtime_dir.hpp"
#include "muster/error.hpp"
#include "slurm/allocation.hpp"

namespace muster::daemon {

namespace {
constexpr const char* kHow =
    " (musterd runs with slurm-gpus = verified: a GPU is leased only within a Slurm job's "
    "allocation, as muster's prolog hook recorded it; doc/operating.md, \"Slurm\")";
}  // namespace

VerifiedGpus::VerifiedGpus(std::string dir, slurm::Proc proc)
    : dir_(std::move(dir)), proc_(std::move(proc)) {
  dir_fd_ = make_own_dir(dir_, "refusing Slurm directory ", "--slurm-dir");
}

VerifiedGpus::~VerifiedGpus() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

std::vector<int64_t> VerifiedGpus::allowed(int64_t pid, int64_t owner) const {
  auto step = slurm::step_of(pid, proc_);
  if (!step)
    throw Error(ErrorCode::kPermissionDenied,
                "pid " + std::to_string(pid) +
                    " runs in no Slurm job step (no Slurm cgroup, no slurmstepd above it): no GPU "
                    "is leased outside Slurm" +
                    kHow + "; a CPU job (--cpu) needs none");
  const std::string job = std::to_string(step->job);
  // The hook's file, relative to the checked directory, never through a
  // link, and only root's: nobody else can have written it.
  int fd = ::openat(dir_fd_, job.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  std::string text;
  if (fd >= 0) {
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 &&
        !(st.st_mode & (S_IWGRP | S_IWOTH)) && st.st_size < 4096) {
      text.resize(static_cast<size_t>(st.st_size));
      ssize_t n = ::read(fd, text.data(), text.size());
      text.resize(n > 0 ? static_cast<size_t>(n) : 0);
    }
    ::close(fd);
  }
  auto alloc = slurm::parse_allocation(text);
  if (!alloc)
    throw Error(ErrorCode::kNoDevice, "Slurm job " + job + " (step " + step->text() +
                                          ") has no allocation recorded in " + dir_ + "/" + job +
                                          kHow);
  if (owner >= 0 && alloc->uid != owner)
    throw Error(ErrorCode::kPermissionDenied,
                "Slurm job " + job + " is uid " + std::to_string(alloc->uid) +
                    "'s, not the job's owner's (uid " + std::to_string(owner) + ")" + kHow);
  if (alloc->gpus.empty())
    throw Error(ErrorCode::kNoDevice, "Slurm job " + job + " has no GPU on this node" + kHow);
  return alloc->gpus;
}

}  // namespace muster::daemon
