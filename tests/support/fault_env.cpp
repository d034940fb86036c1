#include "support/fault_env.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace muster::test {

bool FaultEnv::sync_fails() {
  ++syncs_;
  if (sync_err_ == 0) return false;
  int left = sync_times_;
  // Counted: each failure takes one; two threads never take the last twice.
  while (left > 0 && !sync_times_.compare_exchange_weak(left, left - 1)) {
  }
  if (left == 0) return false;
  ++syncs_failed_;
  errno = sync_err_;
  return true;
}

size_t FaultEnv::fits(int fd, off_t at, size_t n) {
  if (!full_) return n;
  struct stat st;
  off_t end = PosixEnv::fstat(fd, &st) == 0 ? st.st_size : 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = reserved_.find(fd); it != reserved_.end()) end = std::max(end, it->second);
  }
  if (at < end) return std::min(n, static_cast<size_t>(end - at));
  ++writes_refused_;
  errno = ENOSPC;
  return 0;
}

int FaultEnv::close(int fd) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    reserved_.erase(fd);
  }
  return PosixEnv::close(fd);
}

ssize_t FaultEnv::write(int fd, const void* buf, size_t n) {
  off_t at = ::lseek(fd, 0, SEEK_CUR);
  size_t k = at < 0 ? n : fits(fd, at, n);
  if (k == 0 && n > 0) return -1;
  return PosixEnv::write(fd, buf, k);
}

ssize_t FaultEnv::pwrite(int fd, const void* buf, size_t n, off_t at) {
  size_t k = fits(fd, at, n);
  if (k == 0 && n > 0) return -1;
  return PosixEnv::pwrite(fd, buf, k, at);
}

int FaultEnv::fsync(int fd) {
  return sync_fails() ? -1 : PosixEnv::fsync(fd);
}

int FaultEnv::fdatasync(int fd) {
  return sync_fails() ? -1 : PosixEnv::fdatasync(fd);
}

int FaultEnv::fallocate(int fd, int mode, off_t at, off_t len) {
  // What lies within the file's blocks needs none: only past them is a
  // full disk's refusal.
  if (len > 0 && fits(fd, at + len - 1, 1) == 0) return -1;
  if (PosixEnv::fallocate(fd, mode, at, len) != 0) return -1;
  std::lock_guard<std::mutex> lock(mu_);
  off_t& end = reserved_[fd];
  end = std::max(end, at + len);
  return 0;
}

int FaultEnv::ftruncate(int fd, off_t len) {
  if (PosixEnv::ftruncate(fd, len) != 0) return -1;
  // A cut gives back what was reserved past it (tmpfs does).
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = reserved_.find(fd); it != reserved_.end()) it->second = std::min(it->second, len);
  return 0;
}

}  // namespace muster::test
