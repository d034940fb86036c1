// The broadcast pools of local ranks, opened by their daemon (proto::PoolRef):
// a root's pool is read for the chunks it pushes, a pulling rank's pool is
// written with the chunks it pulls, so that a chunk crosses the local socket
// as a few bytes of metadata instead of twice as its MiBs (see
// client/lib/broadcast_nodes.cpp).
//
// The daemon may run as root and the request comes from a local process:
// the reference must not let it touch anything but that process's own pool.
// So the file is the one the requesting process (its pid from SO_PEERCRED)
// holds open as that fd, reached without opening it first (O_PATH through
// /proc/<pid>/fd/<fd>), and it must be a regular file owned by the
// process's uid, with the announced device and inode, and a memfd named as
// libmuster names its pools; only then is it opened, through that same
// O_PATH descriptor, for reading or writing. The bytes move with pread and
// pwrite, never through a mapping: a file the rank shrinks meanwhile gives
// a short read (an error reply), not a SIGBUS that kills the daemon.
//
// Opened files are kept for the next chunks and broadcasts (at most
// kMaxOpen, least recently used first out) and closed after kIdle unused,
// so a dead rank's pool is not held long.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "protocol/cluster_messages.hpp"

namespace muster::daemon {

struct PoolFile {
  int fd = -1;
  std::string what;  // names it in errors: "rank's broadcast pool (/proc/P/fd/N)"
  PoolFile() = default;
  PoolFile(const PoolFile&) = delete;
  PoolFile& operator=(const PoolFile&) = delete;
  ~PoolFile();
  // Exactly n bytes at `at`, or throws (kInvalidArgument: the file is
  // shorter; kInternal: the call failed). A write never grows the file:
  // one shrunk since it was opened is refused. (It does fill a hole the
  // rank punched in its pool, with a page charged to the daemon: a known
  // limit, at most the broadcast's size per rank; tmpfs cannot tell such a
  // hole from the pages libmuster allocated but has not written yet.)
  void read(uint64_t at, char* dst, size_t n) const;
  void write(uint64_t at, const char* src, size_t n) const;
};

class PoolFiles {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxOpen = 16;  // kept for later chunks
  static constexpr size_t kMaxLive = 64;  // open at all (kept, or held by requests in flight)
  static constexpr auto kIdle = std::chrono::seconds(10);

  // The pool `ref` of the local process (pid, uid) that sent the request,
  // for reading or writing, holding at least `end` bytes. Throws
  // kPermissionDenied (not that process's pool, or not a pool) or
  // kInvalidArgument (too small), with a sentence.
  std::shared_ptr<PoolFile> open(int64_t pid, int64_t uid, const proto::PoolRef& ref, uint64_t end,
                                 bool write);
  // Closes the files unused for kIdle (the ones still in flight stay open
  // until their answers come: shared_ptr).
  void expire(Clock::time_point now);
  size_t size() const { return open_.size(); }

 private:
  struct Entry {
    std::shared_ptr<PoolFile> file;
    int64_t pid = 0, uid = 0;
    int32_t fd = -1;
    uint64_t dev = 0, ino = 0;
    bool write = false;
    Clock::time_point used;
  };
  std::vector<Entry> open_;
  std::vector<std::weak_ptr<PoolFile>> live_;  // every file handed out
};

}  // namespace muster::daemon
