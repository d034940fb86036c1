// Streams of a broadcast: a pool read while it is written (see
// broadcast.cpp and pool.hpp). By default the pool is streamed:
// the root stores its metadata before it writes, and readers copy each
// chunk as soon as the root has written it, sleeping on a futex in the
// pool between chunks, so that the root's copy and the readers' overlap.
//
// A streamed pool starts with a StreamHeader: this call's tag (random, also
// in the metadata), the number of chunks written so far (a futex word) and
// the chunk checksums, then the bytes at Meta::offset. The root writes the
// header's tag and a zero count before it stores the metadata; after the
// ready barrier it copies chunk by chunk, storing each chunk's checksum and
// then (release) the new count, and wakes the readers waiting on the count
// (FUTEX_WAKE, shared: readers are other processes). Readers copy chunk k
// as soon as the count passes k, checking its checksum; they sleep on the
// count (FUTEX_WAIT) for at most kStreamPoll at a time, then check that the
// root still holds its pool (else it died: they stop, and the done barrier
// reports the dead rank) and that the header still carries their tag.
//
// A ring (Meta::ring > 0, the default on one node) bounds the pool: chunk k
// goes to slot k % ring, and the root reuses a slot only once every reader
// has copied the chunk in it. Readers count the chunks they have copied in
// their progress counter (after the checksums, one per rank of the node)
// and bump `freed`, the futex word the root sleeps on when every slot is
// taken. A small ring stays in the CPU's cache between the root's copy and
// the readers', so the bytes go through memory about once per reader rather
// than once more for the root (256 MiB to 3 readers on two cores: ~35 ms
// against ~50 ms with the whole pool). A reader that stops early (an error,
// or the writer's fallback) sets its counter to kGone so the writer no
// longer waits for it; the writer finds dead readers, and readers that
// could not open the pool, through the daemon (see stream_write).
// Not installed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "checksum.hpp"
#include "layout.hpp"
#include "meta.hpp"
#include "pool.hpp"

// Internal to libmuster: hidden, so the version script's muster::* does not
// export it.
#pragma GCC visibility push(hidden)
namespace muster::bcast {

struct StreamHeader {
  uint64_t tag;
  uint32_t ready;     // chunks written (futex word)
  uint32_t waiting;   // ring: the writer sleeps on `freed`
  uint64_t aborted;   // == tag: the writer stopped (see stream_abort)
  uint64_t fallback;  // == tag: the writer gave the stream up for a second round (stream_fallback)
  uint32_t freed;     // ring: bumped by readers as they copy chunks (futex word)
  uint32_t pad;
  uint64_t reserved[3];
  // uint64_t sums[chunks] follow, then (ring) uint64_t progress[readers]
};
static_assert(sizeof(StreamHeader) == 64);

constexpr uint64_t kGone = ~uint64_t{0};  // a reader's progress once it stopped reading
// Readers sleep until this many more chunks are ready, and a ring's writer
// until this many slots are free: a ring needs at least twice as many slots.
constexpr size_t kStreamBatch = 8;

// Where a stream's bytes start (Meta::offset): after the header, the sums
// and `readers` progress counters, page-aligned.
size_t stream_offset(size_t size, size_t chunk, uint32_t readers = 0);

// Makes this process's pool for (job, rank) the stream m describes (its
// size, chunk, ring, readers and offset set): a fresh tag, a reset header,
// and the pool named in m. Throws when the pool cannot be had.
std::shared_ptr<Pool> stream_open(const std::string& job, uint32_t rank, Meta& m);

// Thrown by a ring writer's stall check to give the stream up: readers then
// stop without an error, and every rank runs a second round (broadcast.cpp).
struct StreamFallback {};

// Writer, one chunk at a time (the bytes of chunk k are in place): stores
// chunk k's checksum, then the new count, and wakes the readers every few
// chunks and after the last.
void stream_publish(uint8_t* base, size_t k, uint64_t sum, bool last);

// Writer: gives up on the stream tagged `tag`; its readers throw
// peer_exited (within a poll interval) instead of waiting for the rest.
void stream_abort(uint8_t* base, uint64_t tag);

// Writer: gives up on the stream tagged `tag` for a second round; its
// readers stop reading and return false.
void stream_fallback(uint8_t* base, uint64_t tag);

// Root: copies the m.size bytes of src into the stream at base (its header
// made already). Through a ring (m.ring > 0), it waits for the slowest
// reader (ranks other than `writer`) before it reuses a slot; while no
// reader moves it calls stalled() every kStallCheck (to ask the daemon
// whether a reader died or could not open the pool; stalled() throws to
// stop), and throws kTimeout after `wait` without progress.
void stream_write(uint8_t* base, const Meta& m, const Layout& src, uint32_t writer,
                  std::chrono::milliseconds wait, const std::function<void()>& stalled,
                  const std::string& what);

// Reader: waits until chunk k of the stream at base is written; returns
// the number of chunks written. Throws as stream_read does.
uint32_t stream_wait(const uint8_t* base, const Meta& m, size_t k, std::chrono::milliseconds wait,
                     const std::string& from);

// Reader `reader` of a ring: it has copied `done` chunks (kGone: it stops
// reading); wakes the writer when that may free a batch of slots. Nothing
// without a ring.
void ring_report(uint8_t* base, const Meta& m, uint32_t reader, uint64_t done);

// Reader `reader` (its progress counter in a ring): copies the m.size
// bytes of the stream at base into dst as the root writes them, verifying each
// chunk. Returns false when the root gave the stream up for a second round
// (stream_fallback). Throws when the root dies, when the pool holds another
// call, on a bad checksum, or after `wait` without progress.
bool stream_read(uint8_t* base, const Meta& m, const Layout& dst, uint32_t reader,
                 std::chrono::milliseconds wait, const std::string& from);

}  // namespace muster::bcast
#pragma GCC visibility pop
