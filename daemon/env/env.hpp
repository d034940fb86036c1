// What the daemon's state directory is written through, and the clock its
// saves are timed by (as leveldb's Env): the persist code (persist/) calls
// these instead of POSIX, so that a test can hand the daemon a disk that
// fails the way real ones do (EIO on a sync, ENOSPC on a write, counted or
// toggled) in process, where an LD_PRELOAD shim once stood in.
//
// Each call is the POSIX call of the same name with its contract: -1 (or
// a short count) with errno set on failure, paths relative to a directory
// descriptor as openat() takes them. The persist code keeps reading errno,
// so the sentences a client sees ("No space left on device") are the same
// whichever Env failed.
//
// Not through here: the locks (musterd.lock, state.lock: flock), the state
// directory's own checks and opening (dirs/runtime_dir.hpp). The clock:
// the saves' timing and each round's expiries and cluster ticks
// (server/rounds.cpp) read now() here; what core/ and cluster/ read
// themselves (a wait's deadline as it parks, a heartbeat's time) is still
// steady_clock's, so a test's clock that jumps ahead expires waits early
// rather than late.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>

namespace muster::daemon {

class Env {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~Env() = default;

  virtual int openat(int dir_fd, const char* path, int flags, mode_t mode) = 0;
  virtual int close(int fd) = 0;
  virtual ssize_t read(int fd, void* buf, size_t n) = 0;
  virtual ssize_t write(int fd, const void* buf, size_t n) = 0;
  virtual ssize_t pwrite(int fd, const void* buf, size_t n, off_t at) = 0;
  virtual int fsync(int fd) = 0;
  virtual int fdatasync(int fd) = 0;
  virtual int fallocate(int fd, int mode, off_t at, off_t len) = 0;
  virtual int ftruncate(int fd, off_t len) = 0;
  virtual int fstat(int fd, struct stat* st) = 0;
  virtual int renameat(int from_dir, const char* from, int to_dir, const char* to) = 0;
  virtual int unlinkat(int dir_fd, const char* path, int flags) = 0;

  virtual Clock::time_point now() = 0;

  // The real disk and clock; what the daemon runs on unless told otherwise.
  static Env& posix();
};

// Public so that a test's Env can pass to it what it does not fail.
class PosixEnv : public Env {
 public:
  int openat(int dir_fd, const char* path, int flags, mode_t mode) override;
  int close(int fd) override;
  ssize_t read(int fd, void* buf, size_t n) override;
  ssize_t write(int fd, const void* buf, size_t n) override;
  ssize_t pwrite(int fd, const void* buf, size_t n, off_t at) override;
  int fsync(int fd) override;
  int fdatasync(int fd) override;
  int fallocate(int fd, int mode, off_t at, off_t len) override;
  int ftruncate(int fd, off_t len) override;
  int fstat(int fd, struct stat* st) override;
  int renameat(int from_dir, const char* from, int to_dir, const char* to) override;
  int unlinkat(int dir_fd, const char* path, int flags) override;
  Clock::time_point now() override;
};

}  // namespace muster::daemon
