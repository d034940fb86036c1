#include "metrics/job_mapping.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dirs/runtime_dir.hpp"
#include "escape.hpp"
#include "log.hpp"
#include "muster/error.hpp"

namespace muster::daemon::metrics {

JobMapping::JobMapping(std::string dir) : dir_(std::move(dir)) {
  // Readable by dcgm-exporter, which runs as another user.
  dir_fd_ = make_own_dir(dir_, "refusing job mapping directory ", "--job-mapping-dir");
}

JobMapping::~JobMapping() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

void JobMapping::set(int64_t index, const std::string& job) {
  auto it = written_.find(index);
  if (it != written_.end() && it->second == job) return;
  std::string why;
  if (write(index, job, &why)) {
    written_[index] = job;
    return;
  }
  // Said once per content that fails; the next change tries again.
  written_.erase(index);
  log::warning(log::gpu(index, job), "--job-mapping-dir: cannot update the file of GPU " +
                                         std::to_string(index) + " (job '" + job + "'): " + why);
}

bool JobMapping::write(int64_t index, const std::string& job, std::string* why) {
  const std::string name = std::to_string(index);
  const std::string path = dir_ + "/" + name;
  if (job.empty()) {
    if (::unlinkat(dir_fd_, name.c_str(), 0) == 0 || errno == ENOENT) return true;
    *why = "cannot remove " + path + ": " + std::strerror(errno);
    return false;
  }
  const std::string tmp = name + ".tmp";
  // Relative to the checked directory's descriptor: a link planted at the
  // directory's path since does not lead there. A leftover temporary file
  // goes, and the file is made new (O_EXCL follows no link); the final name
  // needs nothing: rename replaces a link, not its target.
  if (::unlinkat(dir_fd_, tmp.c_str(), 0) != 0 && errno != ENOENT) {
    *why = "cannot remove " + dir_ + "/" + tmp + ": " + std::strerror(errno);
    return false;
  }
  int fd =
      ::openat(dir_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = "cannot create " + dir_ + "/" + tmp + ": " + std::strerror(errno);
    return false;
  }
  // dcgm-exporter reads one job id a line: escaped, none can make two.
  std::string line = escape(job) + "\n";
  bool ok = ::fchmod(fd, 0644) == 0 &&
            ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  int err = errno;
  ok = (::close(fd) == 0) && ok;
  if (ok && ::renameat(dir_fd_, tmp.c_str(), dir_fd_, name.c_str()) == 0) return true;
  *why = (ok ? "cannot rename " + dir_ + "/" + tmp + ": "
             : "cannot write " + dir_ + "/" + tmp + ": ") +
         std::string(std::strerror(ok ? errno : err));
  ::unlinkat(dir_fd_, tmp.c_str(), 0);
  return false;
}

}  // namespace muster::daemon::metrics
