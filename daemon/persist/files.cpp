#include "persist/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "muster/error.hpp"

namespace muster::daemon::files {

namespace {

bool write_all(Env& env, int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = env.write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = ENOSPC;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool read_all(const Dir& dir, const std::string& name, std::string& out) {
  const std::string path = dir.shown(name);
  Env& env = *dir.env;
  int fd = env.openat(dir.fd, dir.at(name).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    throw Error(ErrorCode::kInternal, "cannot open " + path + ": " + std::strerror(errno));
  }
  out.clear();
  char buf[65536];
  for (;;) {
    ssize_t n = env.read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      env.close(fd);
      throw Error(ErrorCode::kInternal, "cannot read " + path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  env.close(fd);
  return true;
}

bool write_durably(const Dir& dir, const std::string& name, const std::string& bytes,
                   std::string* why) {
  return write_durably(
      dir, name, [&](const std::function<void(std::string_view)>& emit) { emit(bytes); }, why);
}

bool write_durably(const Dir& dir, const std::string& name, const Produce& produce,
                   std::string* why, uint64_t* written) {
  const std::string tmp = dir.at(name + ".tmp"), path = dir.at(name);
  const std::string shown_tmp = dir.shown(name + ".tmp"), shown = dir.shown(name);
  Env& env = *dir.env;
  std::string failed;
  auto fail = [&](const std::string& what) {
    if (failed.empty()) failed = what + ": " + std::strerror(errno);
  };
  // One left by a crash goes first: the new one is created exclusively.
  env.unlinkat(dir.fd, tmp.c_str(), 0);
  int fd =
      env.openat(dir.fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    fail("cannot create " + shown_tmp);
  } else {
    uint64_t length = 0;
    bool wrote = true;
    try {
      produce([&](std::string_view piece) {
        if (wrote && !(wrote = write_all(env, fd, piece))) fail("cannot write " + shown_tmp);
        length += piece.size();
      });
    } catch (const std::exception& e) {  // out of memory while making it
      if (failed.empty()) failed = "cannot make " + shown_tmp + ": " + e.what();
      wrote = false;
    }
    if (written) *written = length;
    if (wrote && env.fsync(fd) != 0) fail("cannot fsync " + shown_tmp);
    env.close(fd);
    if (failed.empty() && env.renameat(dir.fd, tmp.c_str(), dir.fd, path.c_str()) != 0)
      fail("cannot rename " + shown_tmp + " to " + shown);
  }
  if (failed.empty()) {
    // The rename itself is durable once the directory is synced.
    int dfd = dir.fd != AT_FDCWD
                  ? dir.fd
                  : env.openat(AT_FDCWD, dir.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (dfd < 0 || env.fsync(dfd) != 0) fail("cannot fsync the directory " + dir.path);
    if (dfd >= 0 && dfd != dir.fd) env.close(dfd);
  } else {
    env.unlinkat(dir.fd, tmp.c_str(), 0);
  }
  if (failed.empty()) return true;
  *why = failed;
  return false;
}

}  // namespace muster::daemon::files
