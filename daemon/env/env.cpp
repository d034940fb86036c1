#include "env/env.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace muster::daemon {

Env& Env::posix() {
  // Never destroyed: a save from another static's destructor (a daemon a
  // test left running at exit) still finds it.
  static auto* env = new PosixEnv;
  return *env;
}

int PosixEnv::openat(int dir_fd, const char* path, int flags, mode_t mode) {
  return ::openat(dir_fd, path, flags, mode);
}

int PosixEnv::close(int fd) {
  return ::close(fd);
}

ssize_t PosixEnv::read(int fd, void* buf, size_t n) {
  return ::read(fd, buf, n);
}

ssize_t PosixEnv::write(int fd, const void* buf, size_t n) {
  return ::write(fd, buf, n);
}

ssize_t PosixEnv::pwrite(int fd, const void* buf, size_t n, off_t at) {
  return ::pwrite(fd, buf, n, at);
}

int PosixEnv::fsync(int fd) {
  return ::fsync(fd);
}

int PosixEnv::fdatasync(int fd) {
  return ::fdatasync(fd);
}

int PosixEnv::fallocate(int fd, int mode, off_t at, off_t len) {
  return ::fallocate(fd, mode, at, len);
}

int PosixEnv::ftruncate(int fd, off_t len) {
  return ::ftruncate(fd, len);
}

int PosixEnv::fstat(int fd, struct stat* st) {
  return ::fstat(fd, st);
}

int PosixEnv::renameat(int from_dir, const char* from, int to_dir, const char* to) {
  return ::renameat(from_dir, from, to_dir, to);
}

int PosixEnv::unlinkat(int dir_fd, const char* path, int flags) {
  return ::unlinkat(dir_fd, path, flags);
}

Env::Clock::time_point PosixEnv::now() {
  return Clock::now();
}

}  // namespace muster::daemon
