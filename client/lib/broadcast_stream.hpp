// Streams of a broadcast: a pool read while it is written (see
// broadcast.cpp and broadcast_pool.hpp). By default the pool is streamed:
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
// Not installed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "broadcast_checksum.hpp"
#include "broadcast_meta.hpp"

// Internal to libmuster: hidden, so the version script's muster::* does not
// export it.
#pragma GCC visibility push(hidden)
namespace muster::bcast {

struct StreamHeader {
  uint64_t tag;
  uint32_t ready;  // chunks written (futex word)
  uint32_t pad;
  uint64_t aborted;  // == tag: the writer stopped (see stream_abort)
  uint64_t reserved[5];
  // uint64_t sums[chunks] follow
};
static_assert(sizeof(StreamHeader) == 64);

// Where a stream's bytes start (Meta::offset): after the header, page-aligned.
size_t stream_offset(size_t size, size_t chunk);

// Root: copies size bytes of src into the stream at base (header first).
void stream_write(uint8_t* base, size_t offset, const void* src, size_t size, Algo algo,
                  size_t chunk);

// Writer, one chunk at a time (the bytes of chunk k are in place): stores
// chunk k's checksum, then the new count, and wakes the readers every few
// chunks and after the last.
void stream_publish(uint8_t* base, size_t k, uint64_t sum, bool last);

// Writer: gives up on the stream tagged `tag`; its readers throw
// peer_exited (within a poll interval) instead of waiting for the rest.
void stream_abort(uint8_t* base, uint64_t tag);

// Reader: waits until chunk k of the stream at base is written; returns
// the number of chunks written. Throws as stream_read does.
uint32_t stream_wait(const uint8_t* base, const Meta& m, size_t k, std::chrono::milliseconds wait,
                     const std::string& from);

// Reader: copies m.size bytes of the stream at base to dst as the root
// writes them, verifying each chunk. Throws when the root dies, when the
// pool holds another call, on a bad checksum, or after `wait` without
// progress.
void stream_read(const uint8_t* base, const Meta& m, void* dst, std::chrono::milliseconds wait,
                 const std::string& from);

}  // namespace muster::bcast
#pragma GCC visibility pop
