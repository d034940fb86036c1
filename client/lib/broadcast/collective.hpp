// One collective call on one node (see broadcast.cpp): its sequence number
// and store keys, the metadata a rank publishes (a segment, a pool or a
// stream, or an error), the ready and done barriers, and the second round
// through segments. Not installed.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "checksum.hpp"
#include "layout.hpp"
#include "meta.hpp"
#include "muster/client.hpp"
#include "pool.hpp"
#include "shm.hpp"
#include "shm/segment_names.hpp"
#include "stream.hpp"

// Internal to libmuster: hidden, so the version script's muster::* does not
// export it.
#pragma GCC visibility push(hidden)
namespace muster::bcast {

// A stream's ring (see stream.hpp): small enough to stay in the
// CPU's last-level cache, with enough slots that the root and the readers
// rarely wait for each other.
constexpr size_t kRingChunk = size_t{1} << 20;
constexpr uint32_t kRingSlots = 16;
static_assert(kRingSlots >= 2 * kStreamBatch, "the writer and the readers each wait for a batch");

class Collective {
 public:
  Collective(Client& c, const char* what) : c_(c), info_(c.rank_info()) {
    seq_ = static_cast<uint64_t>(c.add("muster/coll/seq/" + std::to_string(info_.rank), 1));
    prefix_ = "muster/coll/" + std::to_string(info_.generation) + "/" + std::to_string(seq_);
    what_ = std::string(what) + " #" + std::to_string(seq_) + " of job '" + info_.job + "'";
  }
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;
  // The metadata key goes only after a completed collective: after a failure
  // another rank may still have to read it (to learn of the failure), so it
  // stays, a few bytes, until the job ends. The segment goes in any case:
  // every rank reads all metadata before it opens any segment.
  ~Collective() {
    for (const auto& k : finished_) {
      try {
        c_.remove(k);
      } catch (...) {
        // the job, and its store, may be gone already
      }
    }
  }

  const std::string& what() const { return what_; }
  const std::string& job() const { return info_.job; }
  uint32_t rank() const { return info_.rank; }
  uint32_t world() const { return info_.world_size; }

  // Creates this rank's segment of `total` bytes from parts and stores its
  // metadata. A failure is published instead (see fail()) and thrown.
  void publish(const std::vector<Piece>& parts, size_t total, uint64_t signature) {
    Meta m;
    try {
      m.size = total;
      m.algo = preferred_algo();
      m.signature = signature;
      if (total) {
        m.segment =
            shm::segment_name(info_.job, info_.generation, seq_, info_.rank, ::getpid(), nonce());
        seg_.create(m.segment, total);
        ChunkSums sums(m.algo, m.chunk);
        for (const auto& p : parts) {
          sums.feed_zeros(p.offset - sums.pos());  // alignment padding
          auto* src = static_cast<const uint8_t*>(p.data);
          for (size_t o = 0; o < p.size; o += kBlock) {
            size_t n = std::min(kBlock, p.size - o);
            sums.feed(src + o, n);
            seg_.write(p.offset + o, src + o, n);  // src still in cache
          }
        }
        sums.feed_zeros(total - sums.pos());
        m.sums = sums.finish();
      }
    } catch (const Error& e) {
      fail(e);
    } catch (const std::exception& e) {
      fail(Error(ErrorCode::kInternal, what_ + ": " + e.what()));
    }
    c_.set(key(info_.rank), encode(m));
    published_ = true;
  }

  // Publishes e instead of a segment and meets the others at the ready
  // barrier (so they read it and throw too, rather than time out); throws e.
  [[noreturn]] void fail(const Error& e) {
    try {
      Meta m;
      m.status = e.code();
      m.message = e.what();
      c_.set(key(info_.rank), encode(m));
      published_ = true;
      ready();
    } catch (...) {
      // e is the error to report
    }
    throw e;
  }

  // Copies size bytes into this rank's pool and stores their metadata, or
  // returns false, publishing nothing, when the pool cannot be had.
  bool publish_pool(const void* data, size_t size, uint64_t signature) {
    Meta m;
    m.size = size;
    m.algo = preferred_algo();
    m.signature = signature;
    try {
      auto pool = Pool::of(info_.job, info_.rank);
      pool->reserve(size);
      ChunkSums sums(m.algo, m.chunk);
      sums.copy_feed(pool->data(), data, size);  // non-temporal stores, checksummed
      m.sums = sums.finish();
      describe(m, *pool, Pooled::kPool);
    } catch (const std::exception&) {
      return false;
    }
    c_.set(key(info_.rank), encode(m));
    published_ = true;
    return true;
  }

  // Makes this rank's pool a stream for size bytes (see StreamHeader),
  // through a ring unless `whole`, and stores its metadata (also in m); the
  // bytes follow with stream_write after the ready barrier.
  // Returns the pool, or null, publishing nothing, when the pool cannot be
  // had.
  std::shared_ptr<Pool> publish_stream(size_t size, uint64_t signature, bool whole, Meta& m) {
    m = Meta{};
    m.size = size;
    m.algo = preferred_algo();
    m.signature = signature;
    if (!whole) {
      m.chunk = kRingChunk;
      m.ring = static_cast<uint32_t>(std::min<size_t>(kRingSlots, (size + m.chunk - 1) / m.chunk));
      m.readers = info_.world_size;  // one progress counter per rank; the root's is unused
    }
    m.offset = stream_offset(size, m.chunk, m.readers);
    std::shared_ptr<Pool> pool;
    try {
      pool = stream_open(info_.job, info_.rank, m);
    } catch (const std::exception&) {
      return nullptr;
    }
    c_.set(key(info_.rank), encode(m));
    published_ = true;
    return pool;
  }

  void ready() { c_.barrier(prefix_ + "/ready"); }
  void done() {
    c_.barrier(prefix_ + "/done");
    if (published_) finished_.push_back(key(info_.rank));
    published_ = false;
  }

  // After a pooled round, readers that could not open the pool say so
  // (before the done barrier); after it, every rank asks, and all of them
  // then run a second round through a segment if any reader needs one. The
  // counter goes with the last rank to read it.
  void need_segment() { c_.add(prefix_ + "/need", 1); }
  bool segment_needed() {
    const std::string k = prefix_ + "/need";
    int64_t v = c_.add(k, int64_t{1} << 32);
    if ((v >> 32) == static_cast<int64_t>(info_.world_size)) {
      try {
        c_.remove(k);
      } catch (...) {
      }
    }
    return (v & 0xFFFFFFFF) != 0;
  }
  // Moves on to the second round (keys and barriers of its own).
  void second_round() { prefix_ += "/seg"; }

  // A ring writer's stall check (see stream_write): throws StreamFallback when
  // a reader could not open the pool (it said so with need_segment), and
  // peer_exited when the daemon has seen a rank of the job exit.
  void stalled() {
    if (c_.add(prefix_ + "/need", 0) & 0xFFFFFFFF) throw StreamFallback{};
    for (const auto& j : c_.status().jobs) {
      if (j.id != info_.job) continue;
      for (const auto& r : j.ranks)
        if (r.state == "exited")
          throw Error(ErrorCode::kPeerExited,
                      what_ + ": rank " + std::to_string(r.rank) + " exited while reading it");
    }
  }

  // Removes rank r's segments of this collective whose creator is gone: a
  // SIGKILLed root unlinks nothing, and its readers see it die.
  void remove_orphans(uint32_t r) const {
    shm::remove_orphans(shm::round_prefix(info_.job, info_.generation, seq_, r));
  }

  // A publisher's metadata; the error it published is thrown here.
  Meta meta(uint32_t r) {
    Meta m = decode(c_.get(key(r)));
    if (m.status != ErrorCode::kOk)
      throw Error(m.status, what_ + " failed on rank " + std::to_string(r) + ": " + m.message);
    return m;
  }

 private:
  std::string key(uint32_t r) const { return prefix_ + "/" + std::to_string(r); }

  Client& c_;
  RankInfo info_;
  uint64_t seq_ = 0;
  std::string prefix_, what_;
  Segment seg_;                        // unlinked when the collective ends, however it ends
  bool published_ = false;             // this round's metadata
  std::vector<std::string> finished_;  // metadata of completed rounds, removed at the end
};

// Runs body, then the done barrier, which every rank that saw good metadata
// enters even when body failed. Body's error is thrown after the barrier,
// unless the barrier reports a dead rank: that explains body's error too
// (a dead root's segment may be gone before this rank opened it).
template <class F>
void read_then_done(Collective& col, F&& body) {
  std::exception_ptr err;
  try {
    body();
  } catch (...) {
    err = std::current_exception();
  }
  if (err) {
    try {
      col.done();
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kPeerExited) throw;
    } catch (...) {
    }
    std::rethrow_exception(err);
  }
  col.done();
}

}  // namespace muster::bcast
#pragma GCC visibility pop
