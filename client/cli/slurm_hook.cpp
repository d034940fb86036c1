// `muster slurm-hook prolog|epilog`: what slurmd runs, as root, at each
// job's start and end on a node (slurm.conf Prolog= and Epilog=), so that a
// musterd with slurm-gpus = verified knows each job's GPUs from Slurm
// itself. The prolog writes the job's allocation on this node (its uid and
// SLURM_JOB_GPUS, as slurmd sets them for a prolog) to DIR/JOBID
// (common/slurm/allocation.hpp); the epilog removes it. The directory is
// root's and writable by no one else (made so when missing); files are
// made relative to it, never through a link, and renamed into place.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "cli/commands.hpp"
#include "dirs/runtime_dir.hpp"
#include "muster/error.hpp"
#include "slurm/allocation.hpp"

namespace muster::cli {

namespace {

const char* kHookUsage =
    "Usage: muster slurm-hook prolog|epilog [--slurm-dir DIR]\n\n"
    "For slurm.conf on GPU nodes whose musterd runs with slurm-gpus = verified:\n"
    "  Prolog=/usr/libexec/muster/slurm-prolog   (runs: muster slurm-hook prolog)\n"
    "  Epilog=/usr/libexec/muster/slurm-epilog   (runs: muster slurm-hook epilog)\n"
    "slurmd runs them as root with SLURM_JOB_ID, SLURM_JOB_UID and SLURM_JOB_GPUS set;\n"
    "the prolog records the job's GPUs on this node for musterd, the epilog forgets\n"
    "them. Root only. Exit 1 (which drains the node in Slurm) when the record\n"
    "cannot be written.\n";

bool digits(const std::string& s) {
  return !s.empty() && s.size() <= 10 && s.find_first_not_of("0123456789") == std::string::npos;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The record of job `job`, written whole or not at all.
void write_record(int dir_fd, const std::string& job, const std::string& text) {
  // Its own temporary name: another hook may write the same job at once
  // (several slurmd of one host, as in muster's own Slurm test).
  const std::string tmp = "." + job + "." + std::to_string(::getpid()) + ".new";
  ::unlinkat(dir_fd, tmp.c_str(), 0);
  int fd =
      ::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + tmp + ": " + std::strerror(errno));
  bool ok = ::fchmod(fd, 0644) == 0 &&
            ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!ok || ::renameat(dir_fd, tmp.c_str(), dir_fd, job.c_str()) != 0) {
    if (ok) err = errno;
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    throw std::runtime_error("cannot write the record of job " + job + ": " + std::strerror(err));
  }
}

}  // namespace

std::vector<Flag> slurm_hook_flags(bool& help, std::string& dir) {
  return {{"help", 'h', "", "print this help and exit",
           [&help](const std::string& v) { help = switch_value(v); }},
          {"slurm-dir", 0, "DIR", "musterd's --slurm-dir (default /run/muster/slurm)",
           [&dir](const std::string& v) { dir = v; }}};
}

int slurm_hook_main(const std::vector<std::string>& args) {
  bool help = false;
  std::string dir = "/run/muster/slurm";
  FlagParser flags(slurm_hook_flags(help, dir));
  std::vector<std::string> words;
  if (!parse_plain("slurm-hook", flags, args, &words)) return 2;
  if (help) {
    std::cout << kHookUsage << "\nOptions:\n" << flags.help();
    return 0;
  }
  if (words.size() != 1 || (words[0] != "prolog" && words[0] != "epilog")) {
    std::cerr << "muster slurm-hook: needs prolog or epilog\nTry 'muster slurm-hook --help'.\n";
    return 2;
  }
  const bool prolog = words[0] == "prolog";
  const std::string job = env("SLURM_JOB_ID"), uid = env("SLURM_JOB_UID");
  try {
    if (::geteuid() != 0)
      throw std::runtime_error("runs as root, from slurmd's Prolog and Epilog (this is uid " +
                               std::to_string(::geteuid()) + ")");
    if (!digits(job)) throw std::runtime_error("SLURM_JOB_ID is not a job id: '" + job + "'");
    if (prolog && !digits(uid))
      throw std::runtime_error("SLURM_JOB_UID is not a uid: '" + uid + "'");
    if (dir.empty() || dir[0] != '/') throw std::runtime_error("--slurm-dir must be absolute");
    int dir_fd = daemon::make_own_dir(dir, "refusing Slurm directory ", "--slurm-dir");
    if (!prolog) {
      bool gone = ::unlinkat(dir_fd, job.c_str(), 0) == 0 || errno == ENOENT;
      ::close(dir_fd);
      if (!gone) throw std::runtime_error("cannot remove the record of job " + job);
      return 0;
    }
    auto gpus = slurm::parse_gpu_list(env("SLURM_JOB_GPUS"));
    if (!gpus)
      throw std::runtime_error("SLURM_JOB_GPUS is not a GPU list: '" + env("SLURM_JOB_GPUS") + "'");
    try {
      write_record(dir_fd, job, slurm::allocation_text({std::stoll(uid), *gpus}));
    } catch (...) {
      ::close(dir_fd);
      throw;
    }
    ::close(dir_fd);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "muster slurm-hook " << words[0] << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace muster::cli
