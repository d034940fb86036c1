// The metadata of a broadcast (see broadcast.cpp): what a publishing rank
// stores in the job's store under muster/coll/<generation>/<seq>/<rank> —
// size, chunk size, checksums, segment or pool name, or an error. Not
// installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checksum.hpp"
#include "muster/error.hpp"

// Internal to libmuster: hidden, so the version script's muster::* does not
// export it.
#pragma GCC visibility push(hidden)
namespace muster::bcast {

constexpr size_t kAlign = 64;  // offsets of packed buffers

// Where a broadcast's bytes are; the values travel in the metadata.
enum class Pooled : uint32_t {
  kSegment = 0,      // a POSIX shared-memory segment, written whole
  kPool = 1,         // the root's pool (memfd), written whole
  kStream = 2,       // the root's pool, streamed chunk by chunk (see Stream)
  kAcrossNodes = 3,  // no pool on the root's node: the other nodes get
                     // chunks through the daemons, checksums with each
};

struct Meta {
  ErrorCode status = ErrorCode::kOk;
  std::string message;  // when status != ok
  uint64_t size = 0;    // segment bytes
  uint64_t chunk = kChunk;
  Algo algo = kXxh3;
  uint64_t signature = 0;  // what was packed, so readers can check they agree
  std::string segment;     // shm name, or pool (memfd) name; empty when size == 0
  // A pool (see Pool): its owner's pid and descriptor, so that readers can
  // open /proc/<pid>/fd/<fd>, and the file's identity, which they check.
  Pooled pooled = Pooled::kSegment;
  int64_t pid = 0;
  int32_t fd = -1;
  uint64_t dev = 0, ino = 0;
  // A streamed pool (kStream): this call's tag, and where the bytes start
  // (after the header); the sums are in the header instead.
  uint64_t tag = 0, offset = 0;
  // A ring (kStream, ring > 0): the stream reuses `ring` chunk slots,
  // and each of `readers` progress counters (one per rank of the node) says
  // how far that reader is, so that the writer reuses a slot only once
  // every reader is past it (see stream.hpp).
  uint32_t ring = 0, readers = 0;
  std::vector<uint64_t> sums;
};

// The bytes of the pool that m uses: header and chunks, or the whole ring.
uint64_t pool_span(const Meta& m);

// Native byte order: the store's readers are on this node, or (broadcast
// across nodes) on nodes of the same kind.
std::string encode(const Meta& m);
Meta decode(const std::string& s);

}  // namespace muster::bcast
#pragma GCC visibility pop
