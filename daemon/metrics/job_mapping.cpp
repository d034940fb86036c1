#include "metrics/job_mapping.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "log.hpp"

namespace muster::daemon::metrics {

JobMapping::JobMapping(std::string dir) : dir_(std::move(dir)) {
  // Readable by dcgm-exporter, which runs as another user.
  // Modes set explicitly: the unit's UMask=0077 would make them 0700/0600.
  if (::mkdir(dir_.c_str(), 0755) == 0)
    ::chmod(dir_.c_str(), 0755);
  else if (errno != EEXIST)
    log::warning("--job-mapping-dir " + dir_ + ": cannot create it: " + std::strerror(errno));
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
  std::string path = dir_ + "/" + std::to_string(index);
  if (job.empty()) {
    if (::unlink(path.c_str()) == 0 || errno == ENOENT) return true;
    *why = "cannot remove " + path + ": " + std::strerror(errno);
    return false;
  }
  std::string tmp = path + ".tmp";
  // The directory may be writable by others (an operator's choice): a link
  // planted at the temporary name must not make root write through it, so
  // whatever is there goes, and the file is made new (O_EXCL follows no
  // link). One planted again in between fails the write, which is logged.
  // The final name needs nothing: rename replaces a link, not its target.
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) {
    *why = "cannot remove " + tmp + ": " + std::strerror(errno);
    return false;
  }
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = "cannot create " + tmp + ": " + std::strerror(errno);
    return false;
  }
  std::string line = job + "\n";
  bool ok = ::fchmod(fd, 0644) == 0 &&
            ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  int err = errno;
  ok = (::close(fd) == 0) && ok;
  if (ok && ::rename(tmp.c_str(), path.c_str()) == 0) return true;
  *why = (ok ? "cannot rename " + tmp + ": " : "cannot write " + tmp + ": ") +
         std::string(std::strerror(ok ? errno : err));
  ::unlink(tmp.c_str());
  return false;
}

}  // namespace muster::daemon::metrics
