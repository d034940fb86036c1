// The broadcast pools of local ranks, opened by their daemon (proto::PoolRef):
// a root's pool is read for the chunks it pushes, a pulling rank's pool is
// written with the chunks it pulls, so that a chunk crosses the local socket
// as a few bytes of metadata instead of twice as its MiBs (see
// client/lib/broadcast/nodes.cpp).
//
// The daemon may run as root and the request comes from a local process:
// the reference must not let it touch anything but that process's own pool.
// So the file is the one the requesting process (its pid from SO_PEERCRED)
// holds open as that fd, reached without opening it first (O_PATH through
// /proc/<pid>/fd/<fd>), and it must be a regular file owned by the
// process's uid, with the announced device and inode, and a memfd named as
// libmuster names its pools; only then is it opened, through that same
// O_PATH descriptor, for reading or writing. libmuster seals its pools
// against shrinking (F_SEAL_SHRINK); such a file is mapped and the bytes
// move with memcpy (well under half of pread's cost here), guarded against SIGBUS
// (cluster/broadcast/guarded_copy.hpp), and a root's chunks go to the next node
// straight from its pages (map_chunk). A file without the seal could shrink
// under a mapping: its bytes move with pread and pwrite, and a file the
// rank shrinks meanwhile gives a short read (an error reply).
//
// Opened files are kept for the next chunks and broadcasts (at most
// kMaxOpen, least recently used first out) and closed after kIdle unused,
// so a dead rank's pool is not held long.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/cluster_messages.hpp"

namespace muster::daemon {

struct PoolFile {
  int fd = -1;
  std::string what;       // names it in errors: "rank's broadcast pool (/proc/P/fd/N)"
  bool sealed = false;    // against shrinking: it may be mapped
  bool writable = false;  // opened for writing
  char* map = nullptr;    // [0, mapped) of it, when sealed and mapped
  size_t mapped = 0;
  // Which 2 MiB of the mapping have their page tables made: done once, not
  // a walk of every page for every chunk (as costly as the copy).
  mutable std::vector<bool> warm;
  // map_chunk's spans, kept for the next broadcasts' chunks at the same
  // place (their page tables made once), by file offset and length.
  struct Span;
  mutable std::map<std::pair<uint64_t, size_t>, std::shared_ptr<Span>> spans;
  PoolFile() = default;
  PoolFile(const PoolFile&) = delete;
  PoolFile& operator=(const PoolFile&) = delete;
  ~PoolFile();
  // Exactly n bytes at `at`, or throws (kInvalidArgument: the file is
  // shorter; kInternal: the call failed). A write never grows the file:
  // one shrunk since it was opened is refused. (A pool with holes is
  // refused at open, PoolFiles::open; one the rank punches during a
  // broadcast is filled with a page charged to the daemon: a known limit,
  // at most the broadcast's size per rank.)
  void read(uint64_t at, char* dst, size_t n) const;
  void write(uint64_t at, const char* src, size_t n) const;
  // Maps [0, size) when sealed (a larger mapping replaces a smaller one),
  // within the daemon's budget for mappings (twice the machine's memory);
  // false if it cannot (then read and write use pread and pwrite). The
  // caller checked that the file holds size bytes.
  bool map_to(uint64_t size);
  // Makes the page tables of [at, at + n) of the mapping, the first time.
  void warm_up(uint64_t at, size_t n, bool write) const;
};

// A chunk of a root's sealed pool, sent without copying its bytes: `head`
// followed by the file's bytes [at, at + n) in one span of memory (an
// anonymous page whose end holds the head, the file's pages mapped right
// after it). Null when that cannot be (the file is not mapped, `at` is not
// on a page, the head is longer than a page, or the pages cannot be read
// now): then the caller copies.
struct MappedChunk {
  std::shared_ptr<void> held;  // unmaps the span
  std::string_view frame;      // head + bytes
};
std::optional<MappedChunk> map_chunk(const PoolFile& f, std::string_view head, uint64_t at,
                                     size_t n);

// How many bytes of pools the daemon may map at once (tests; 0: twice the
// machine's memory, the default).
void set_pool_map_budget(uint64_t bytes);

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
