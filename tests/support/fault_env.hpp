// A disk that fails on demand, for the daemon's state directory in process
// (daemon/env/env.hpp): syncs that fail (EIO, as a dying disk's), and a disk
// that is full (ENOSPC: no write or reservation gets a block the file does
// not already have, as a full tmpfs does). Each fault is toggled, or counted
// (the next n calls fail, then the disk works again). Safe to flip from the
// test's thread while a server's thread writes.
#pragma once

#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>

#include "env/env.hpp"

namespace muster::test {

class FaultEnv : public daemon::PosixEnv {
 public:
  // fsync and fdatasync fail with err: `times` calls, or every call until
  // heal() when times < 0.
  void fail_syncs(int err = EIO, int times = -1) {
    sync_err_ = err;
    sync_times_ = times;
  }
  // No new block for any file: a write past what a file holds and has
  // reserved writes what fits and then fails with ENOSPC, as a reservation
  // (fallocate) past it does.
  void fill() { full_ = true; }
  // Syncs work again, and the disk has room.
  void heal() {
    sync_err_ = 0;
    full_ = false;
  }

  // How many calls each fault failed so far: a test shows its fault was met.
  int syncs_failed() const { return syncs_failed_; }
  int writes_refused() const { return writes_refused_; }
  int syncs() const { return syncs_; }

  int close(int fd) override;
  ssize_t write(int fd, const void* buf, size_t n) override;
  ssize_t pwrite(int fd, const void* buf, size_t n, off_t at) override;
  int fsync(int fd) override;
  int fdatasync(int fd) override;
  int fallocate(int fd, int mode, off_t at, off_t len) override;
  int ftruncate(int fd, off_t len) override;

 private:
  bool sync_fails();
  // How many of n bytes at `at` fit in fd's blocks; sets errno to ENOSPC
  // (and counts a refusal) when none do.
  size_t fits(int fd, off_t at, size_t n);

  std::atomic<int> sync_err_{0};
  std::atomic<int> sync_times_{0};
  std::atomic<bool> full_{false};
  std::atomic<int> syncs_failed_{0};
  std::atomic<int> writes_refused_{0};
  std::atomic<int> syncs_{0};
  std::mutex mu_;
  std::map<int, off_t> reserved_;  // each open file's fallocate()d end
};

}  // namespace muster::test
