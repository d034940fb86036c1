// Pools of a broadcast: segments kept across broadcasts (see broadcast.cpp).
// Broadcasts of kPoolMin bytes or more go through the root's pool, so that
// no pages are allocated or freed per call (256 MiB: ~110 ms to allocate,
// ~35 ms to free as a fresh segment).
//
// A root's pool is a memfd of its own (one per job and rank in a process),
// grown when a broadcast needs more and made anew when one needs far less
// (it is sealed against shrinking, for the daemon's mapping), and kept
// mapped: after the first call no pages are allocated, zeroed, faulted
// in or freed. It has no name in /dev/shm, so nothing is left behind when
// the process dies, however it dies. Readers open it as /proc/<pid>/fd/<fd>
// (allowed to a process that may read the root's /proc entries: same uid,
// or CAP_SYS_PTRACE; Yama does not restrict this), check that the link
// names the pool (a random part) and that the file is the announced one,
// and keep it mapped too (one View per job, reader and root).
//
// Reuse is safe because a root writes its pool only when it publishes, and
// it publishes again only after the done barrier of the previous
// collective, which every reader enters only once it has stopped reading.
// Not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "meta.hpp"
#include "shm.hpp"

// Internal to libmuster: hidden, so the version script's muster::* does not
// export it.
#pragma GCC visibility push(hidden)
namespace muster::bcast {

class Pool : NoCopy {
 public:
  Pool(const std::string& job, uint32_t rank);

  // Makes the pool at least size bytes (size > 0) and mapped; throws on failure.
  void reserve(size_t size);

  uint8_t* data() const { return base_; }
  const std::string& name() const { return name_; }
  int fd() const { return fd_; }
  uint64_t dev() const { return dev_; }
  uint64_t ino() const { return ino_; }

  // The pool of this process for (job, rank), made on first use.
  static std::shared_ptr<Pool> of(const std::string& job, uint32_t rank);

 private:
  [[noreturn]] void fail(const char* call, int e);

  std::string name_;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  size_t cap_ = 0;   // mapped
  size_t file_ = 0;  // the memfd's size: it never shrinks (F_SEAL_SHRINK)
  uint64_t dev_ = 0, ino_ = 0;
};

// Names pool in m, so that readers can open it: pooled is kPool (written
// whole) or kStream.
void describe(Meta& m, const Pool& pool, Pooled pooled);

// Whether m's root still holds its pool open (so, is alive), and this
// process may see it.
bool pool_linked(const Meta& m);

// A reader's mapping of a root's pool.
class View : NoCopy {
 public:
  ~View();

  // Makes the pool of m readable; false when this process may not open it
  // (then the bytes come through a segment instead).
  bool attach(const Meta& m);

  uint8_t* data() const { return base_; }  // writable: a ring's progress counters

  // This process's view, for reader `me` of job, of root's pool.
  static std::shared_ptr<View> of(const std::string& job, uint32_t me, uint32_t root);
  // Forgets it (after a failure: the root may be gone; its pool need not
  // stay alive through this mapping).
  static void drop(const std::string& job, uint32_t me, uint32_t root);

 private:
  static std::map<std::string, std::shared_ptr<View>>* views();
  static std::string key(const std::string& job, uint32_t me, uint32_t root);
  void reset();

  int fd_ = -1;
  uint8_t* base_ = nullptr;
  size_t len_ = 0;
  std::string name_;
  uint64_t dev_ = 0, ino_ = 0;
};

}  // namespace muster::bcast
#pragma GCC visibility pop
