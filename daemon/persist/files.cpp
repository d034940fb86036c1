#include "persist/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "muster/error.hpp"

namespace muster::daemon::files {

namespace {

bool write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = ENOSPC;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool read_all(const std::string& path, std::string& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    throw Error(ErrorCode::kInternal, "cannot open " + path + ": " + std::strerror(errno));
  }
  out.clear();
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw Error(ErrorCode::kInternal, "cannot read " + path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

bool write_durably(const std::string& dir, const std::string& tmp, const std::string& path,
                   const std::string& bytes, std::string* why) {
  std::string failed;
  auto fail = [&](const std::string& what) {
    if (failed.empty()) failed = what + ": " + std::strerror(errno);
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    fail("cannot create " + tmp);
  } else {
    if (!write_all(fd, bytes))
      fail("cannot write " + tmp);
    else if (::fsync(fd) != 0)
      fail("cannot fsync " + tmp);
    ::close(fd);
    if (failed.empty() && ::rename(tmp.c_str(), path.c_str()) != 0)
      fail("cannot rename " + tmp + " to " + path);
  }
  if (failed.empty()) {
    // The rename itself is durable once the directory is synced.
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || ::fsync(dfd) != 0) fail("cannot fsync the directory " + dir);
    if (dfd >= 0) ::close(dfd);
  } else {
    ::unlink(tmp.c_str());
  }
  if (failed.empty()) return true;
  *why = failed;
  return false;
}

}  // namespace muster::daemon::files
