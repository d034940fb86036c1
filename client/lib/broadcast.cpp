// Model broadcast and averaging on one node: Client::broadcast and
// Client::sync_model.
//
// Bulk bytes travel through POSIX shared memory, never through the daemon:
// a publishing rank creates a segment
// (/dev/shm/muster.<job>.<generation>.<seq>.r<rank>.<nonce>), copies its
// bytes in, checksumming each 4 MiB chunk, and stores a small metadata value
// (size, chunk size, checksums, segment name, or an error) in the job's store
// under muster/coll/<generation>/<seq>/<rank>. Then:
//
//   publisher: set(meta)  barrier(ready)                          barrier(done)  unlink, delete
//   reader:               barrier(ready)  get(meta)  map + copy    barrier(done)
//
// Readers verify every chunk's checksum; a mismatch throws kInternal. The
// done barrier is entered iff every meta read says "ok", so all ranks agree
// on whether to wait there; a rank with a local error (size mismatch, bad
// checksum) still enters it, then throws. A publisher that cannot publish
// stores its error instead and meets the others at the ready barrier, so
// they throw it too rather than time out. Barriers fail fast with
// peer_exited when a rank ends, so a dead rank makes every other rank throw.
// Segments are unlinked by their creator on every path (RAII); only a
// SIGKILLed creator leaves one behind. Metadata keys are deleted after a
// completed collective; a failed one leaves them (tiny) for the job's life.
//
// Broadcasts of kPoolMin bytes or more go through the root's pool instead
// (see broadcast_pool.hpp); so does sync_model without reduce flags, rank
// 0's buffers packed as one broadcast (local_broadcast, bcast::Layout).
// Same metadata, checksums and barriers; a reader that may not open the
// pool adds to a counter before the done barrier, and if any did, every
// rank then runs a second round through a segment. Both
// paths give the same guarantees: a reader claims success only after the
// done barrier, which fails when any rank has died, and only with verified
// bytes. By default the pool is streamed (see broadcast_stream.hpp).
// MUSTER_BCAST=shm|pool|stream forces one path (pool: written whole before
// the ready barrier, checksums in the metadata).
//
// The sequence number of a collective comes from a per-rank counter in the
// job's store (muster/coll/seq/<rank>): ranks that call collectives in the
// same order get the same numbers, whatever Client object they use.
//
// The parts: broadcast_checksum (chunk checksums, CPU dispatch),
// broadcast_meta (the metadata), broadcast_shm (segments), broadcast_pool
// (pools), broadcast_stream (streams); here, one collective and the public
// API.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "broadcast_checksum.hpp"
#include "broadcast_layout.hpp"
#include "broadcast_meta.hpp"
#include "broadcast_nodes.hpp"
#include "broadcast_pool.hpp"
#include "broadcast_shm.hpp"
#include "broadcast_stream.hpp"
#include "client_impl.hpp"
#include "muster/client.hpp"

namespace muster {

using namespace bcast;

namespace {

constexpr size_t kReduceBlock = size_t{64} << 10;
constexpr size_t kPoolMin = size_t{1} << 20;  // smaller broadcasts use a fresh segment

// A stream's ring (see broadcast_stream.hpp): small enough to stay in the
// CPU's last-level cache, with enough slots that the root and the readers
// rarely wait for each other.
constexpr size_t kRingChunk = size_t{1} << 20;
constexpr uint32_t kRingSlots = 16;
static_assert(kRingSlots >= 2 * kStreamBatch, "the writer and the readers each wait for a batch");

// How a broadcast moves its bytes: MUSTER_BCAST=shm forces a fresh segment
// per call, MUSTER_BCAST=pool the root's pool (for any size, written whole
// before readers start), MUSTER_BCAST=stream the root's pool read while it
// is written, through a ring (any size), MUSTER_BCAST=whole a stream
// through a pool as large as the broadcast; by default the ring carries
// broadcasts of kPoolMin bytes or more. Read on each call.
enum class BroadcastPath { kAuto, kSegment, kPool, kStream, kWhole };
BroadcastPath broadcast_path() {
  const char* e = std::getenv("MUSTER_BCAST");
  if (e && std::string_view(e) == "shm") return BroadcastPath::kSegment;
  if (e && std::string_view(e) == "pool") return BroadcastPath::kPool;
  if (e && std::string_view(e) == "stream") return BroadcastPath::kStream;
  if (e && std::string_view(e) == "whole") return BroadcastPath::kWhole;
  return BroadcastPath::kAuto;
}

size_t align_up(size_t v) {
  return (v + kAlign - 1) & ~(kAlign - 1);
}

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
        char tail[64];
        std::snprintf(tail, sizeof tail, ".%llu.r%u.%016llx", static_cast<unsigned long long>(seq_),
                      info_.rank, static_cast<unsigned long long>(nonce()));
        m.segment =
            "/muster." + name_part(info_.job) + "." + std::to_string(info_.generation) + tail;
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
      m.segment = pool->name();
      m.pooled = 1;
      m.pid = ::getpid();
      m.fd = pool->fd();
      m.dev = pool->dev();
      m.ino = pool->ino();
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
    m.tag = nonce() | 1;
    std::shared_ptr<Pool> pool;
    try {
      pool = Pool::of(info_.job, info_.rank);
      pool->reserve(pool_span(m));
      auto* h = reinterpret_cast<StreamHeader*>(pool->data());
      __atomic_store_n(&h->ready, 0u, __ATOMIC_RELAXED);
      __atomic_store_n(&h->waiting, 0u, __ATOMIC_RELAXED);
      if (m.ring) std::memset(h + 1, 0, m.offset - sizeof *h);  // sums and progress
      __atomic_store_n(&h->tag, m.tag, __ATOMIC_RELEASE);
      m.segment = pool->name();
      m.pooled = 2;
      m.pid = ::getpid();
      m.fd = pool->fd();
      m.dev = pool->dev();
      m.ino = pool->ino();
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

// Copies a segment range to dst, checksumming the bytes on the way (one
// pass); the gap since the last range is checksummed in place.
void copy_verified(ChunkSums& sums, const Segment& seg, size_t offset, void* dst, size_t size) {
  if (sums.pos() < offset) sums.feed(seg.data() + sums.pos(), offset - sums.pos());
  sums.copy_feed(dst, seg.data() + offset, size);
}

void finish_verified(ChunkSums& sums, const Segment& seg) {
  if (sums.pos() < seg.size()) sums.feed(seg.data() + sums.pos(), seg.size() - sums.pos());
  sums.finish();
}

size_t elem_size(Client::Buffer::Type t) {
  switch (t) {
    case Client::Buffer::Type::kFloat32:
      return 4;
    case Client::Buffer::Type::kFloat64:
      return 8;
    default:
      return 1;
  }
}

// dst[i] = (sum over ranks r, in rank order, of src[r][i]) / n, accumulated
// in double and rounded once, so every rank computes identical bits. src[me]
// may alias dst: each element is read before it is written.
template <class T>
void average_block(const std::vector<const uint8_t*>& src, uint8_t* dst, size_t count,
                   double* acc) {
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, src[0] + i * sizeof(T), sizeof(T));
    acc[i] = static_cast<double>(v);
  }
  for (size_t r = 1; r < src.size(); ++r)
    for (size_t i = 0; i < count; ++i) {
      T v;
      std::memcpy(&v, src[r] + i * sizeof(T), sizeof(T));
      acc[i] += static_cast<double>(v);
    }
  const double n = static_cast<double>(src.size());
  for (size_t i = 0; i < count; ++i) {
    T v = static_cast<T>(acc[i] / n);
    std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
  }
}

// The bytes of `layout` from root to every other rank of one node
// (Client::broadcast, and sync_model without reduce flags), by the path
// MUSTER_BCAST picks; `local` is an error this rank found before, reported
// through the collective. A reader's `agree` throws when the root's
// metadata does not fit this rank's layout.
void local_broadcast(Collective& col, const Layout& layout, uint64_t signature, uint32_t root,
                     const std::optional<Error>& local, std::chrono::milliseconds wait,
                     const std::function<void(const Meta&)>& agree) {
  const size_t size = layout.total();
  const std::vector<Piece>& parts = layout.pieces();
  if (col.rank() == root) {
    if (local) col.fail(*local);
    const BroadcastPath path = broadcast_path();
    std::shared_ptr<Pool> stream;
    Meta sm;
    if (size && (path == BroadcastPath::kStream || path == BroadcastPath::kWhole ||
                 (path == BroadcastPath::kAuto && size >= kPoolMin)))
      stream = col.publish_stream(size, signature, path == BroadcastPath::kWhole, sm);
    const uint8_t* whole = size ? layout.in_one(0, size) : nullptr;  // one buffer, no gaps
    const bool pooled = stream || (whole && path == BroadcastPath::kPool &&
                                   col.publish_pool(whole, size, signature));
    if (!pooled) col.publish(parts, size, signature);
    col.ready();
    // The done barrier follows whatever happens here: a dead reader fails it
    // for every rank, and it says so (see read_then_done).
    read_then_done(col, [&] {
      if (!stream) return;
      try {
        stream_write(
            stream->data(), sm, layout, col.rank(), wait, [&] { col.stalled(); }, col.what());
      } catch (const StreamFallback&) {
        stream_fallback(stream->data(), sm.tag);  // a reader needs a segment: all take one
      } catch (...) {
        stream_abort(stream->data(), sm.tag);
        throw;
      }
    });
    if (pooled && col.segment_needed()) {
      col.second_round();
      col.publish(parts, size, signature);
      col.ready();
      col.done();
    }
    return;
  }
  col.ready();
  Meta m = col.meta(root);
  const std::string from = col.what() + " from rank " + std::to_string(root);
  auto check = [&] {
    if (local) throw *local;
    agree(m);
  };
  // Reads every piece from the packed bytes at p, checking them all.
  auto copy_all = [&](ChunkSums& sums, const uint8_t* p) {
    for (const auto& piece : layout.pieces()) {
      sums.feed(p + sums.pos(), piece.offset - sums.pos());  // the gap before it
      sums.copy_feed(piece.data, p + piece.offset, piece.size);
    }
    sums.feed(p + sums.pos(), size - sums.pos());
    sums.finish();
  };
  auto from_segment = [&](const Meta& sm) {
    if (!size) return;
    if (sm.size != size) throw Error(ErrorCode::kInternal, from + ": the segment has another size");
    Segment seg;
    seg.open(sm.segment, sm.size);
    ChunkSums sums(sm.algo, sm.chunk, &sm.sums, from);
    copy_all(sums, seg.data());
  };
  if (!m.pooled) {
    read_then_done(col, [&] {
      check();
      from_segment(m);
    });
    return;
  }
  // From root's pool; a reader that may not open it says so, and then every
  // rank takes part in a second round through a segment (see Collective).
  try {
    bool need = false, reading = false;
    std::exception_ptr err;
    auto view = View::of(col.job(), col.rank(), root);
    try {
      check();
      if (!view->attach(m)) {
        need = true;
        col.need_segment();
      } else if (m.pooled == 2) {
        // false: the root gave the ring up because another reader could not
        // open it; the second round brings the bytes.
        reading = true;
        need = !stream_read(view->data(), m, layout, col.rank(), wait, from);
      } else {
        ChunkSums sums(m.algo, m.chunk, &m.sums, from);
        copy_all(sums, view->data());
      }
    } catch (...) {
      err = std::current_exception();
      // A ring's root waits for every reader: one that will not read says
      // so, in the ring or else through the store (stream_read did already).
      if (m.ring && !reading) {
        bool left = false;
        try {
          if (view->attach(m)) {
            ring_report(view->data(), m, col.rank(), kGone);
            left = true;
          }
        } catch (...) {
        }
        try {
          if (!left) col.need_segment();  // the root gives the ring up for a second round
        } catch (...) {
          // the daemon is gone: the root's stall check fails too
        }
      }
    }
    try {
      col.done();
    } catch (const Error& e) {
      if (err && e.code() != ErrorCode::kPeerExited) std::rethrow_exception(err);
      throw;
    }
    // Past the done barrier, every rank asks whether a second round follows.
    if (col.segment_needed()) {
      col.second_round();
      col.ready();
      Meta sm = col.meta(root);
      read_then_done(col, [&] {
        if (need) from_segment(sm);
      });
    }
    if (err) std::rethrow_exception(err);
  } catch (...) {
    View::drop(col.job(), col.rank(), root);  // root may be gone: let its pool go
    throw;
  }
}

}  // namespace

void Client::broadcast(void* data, size_t size, uint32_t root) {
  const auto& info = rank_info();
  if (root >= info.world_size)
    throw Error(ErrorCode::kInvalidArgument, "broadcast root " + std::to_string(root) +
                                                 " is outside the job's world size " +
                                                 std::to_string(info.world_size));
  if (info.world_size == 1) {
    if (!data && size) throw Error(ErrorCode::kInvalidArgument, "broadcast data is NULL");
    return;
  }
  if (info.num_nodes > 1)  // through the daemons, then shared memory in each node
    return NodeBroadcast::run(*this, {{data, size, 0}}, size, size, root, "broadcast");
  // Local errors go through the collective, so the other ranks learn of
  // them instead of waiting for a timeout.
  Collective col(*this, "broadcast");
  std::optional<Error> local;
  if (!data && size)
    local = Error(ErrorCode::kInvalidArgument,
                  col.what() + ": data is NULL on rank " + std::to_string(col.rank()));
  const std::vector<Piece> pieces{{data, size, 0}};
  local_broadcast(col, Layout(pieces, size), size, root, local,
                  std::chrono::milliseconds(impl_->wait_ms(std::nullopt)), [&](const Meta& m) {
                    if (m.size != size)
                      throw Error(ErrorCode::kInvalidArgument,
                                  col.what() + ": this rank's buffer has " + std::to_string(size) +
                                      " bytes, root " + std::to_string(root) + "'s " +
                                      std::to_string(m.size));
                  });
}

void Client::sync_model(const std::vector<Buffer>& buffers, bool reduce_parameters,
                        bool reduce_buffers) {
  const auto& info = rank_info();
  // Each buffer is taken from rank 0 (packed first, in rank 0's segment only)
  // or averaged (packed after that, in every rank's segment).
  std::vector<size_t> from_root, averaged;
  std::optional<Error> local;  // reported through the collective, see broadcast()
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto& b = buffers[i];
    bool avg =
        b.type != Buffer::Type::kBytes && (b.is_parameter ? reduce_parameters : reduce_buffers);
    if (!local && !b.data && b.size)
      local = Error(ErrorCode::kInvalidArgument, "sync_model buffer " + std::to_string(i) +
                                                     " has NULL data on rank " +
                                                     std::to_string(info.rank));
    if (!local && avg && b.size % elem_size(b.type))
      local = Error(ErrorCode::kInvalidArgument,
                    "sync_model buffer " + std::to_string(i) + " has " + std::to_string(b.size) +
                        " bytes, not a whole number of " + std::to_string(elem_size(b.type)) +
                        "-byte floats");
    (avg ? averaged : from_root).push_back(i);
  }
  if (info.world_size == 1) {
    if (local) throw *local;
    return;
  }

  // The layout, and a signature of it so that ranks can check they agree.
  std::vector<size_t> offset(buffers.size());
  size_t root_bytes = 0, avg_bytes = 0;
  Hasher sh(kMul64);
  auto sig_add = [&](uint64_t v) { sh.update(reinterpret_cast<const uint8_t*>(&v), 8); };
  for (size_t i : from_root) {
    offset[i] = root_bytes;
    root_bytes = align_up(root_bytes + buffers[i].size);
    sig_add(i), sig_add(buffers[i].size), sig_add(0);
  }
  for (size_t i : averaged) {
    offset[i] = avg_bytes;
    avg_bytes = align_up(avg_bytes + buffers[i].size);
    sig_add(i), sig_add(buffers[i].size), sig_add(1 + static_cast<uint64_t>(buffers[i].type));
  }
  const uint64_t sig = sh.final();
  const bool reduce = !averaged.empty();
  std::vector<Piece> pieces;  // rank 0's part
  for (size_t i : from_root) pieces.push_back({buffers[i].data, buffers[i].size, offset[i]});
  if (info.num_nodes > 1) {
    if (reduce)
      throw Error(ErrorCode::kInvalidArgument,
                  "sync_model cannot average buffers of a job that spans nodes (job '" + info.job +
                      "' has " + std::to_string(info.num_nodes) +
                      "): use an all-reduce of your collective library (NCCL, gloo) for that; "
                      "sync_model without reduce flags broadcasts rank 0's buffers");
    return NodeBroadcast::run(*this, pieces, root_bytes, sig, 0, "sync_model", local);
  }

  Collective col(*this, "sync_model");
  if (!reduce) {  // rank 0's buffers, packed: a broadcast (through its ring when large)
    local_broadcast(col, Layout(pieces, root_bytes), sig, 0, local,
                    std::chrono::milliseconds(impl_->wait_ms(std::nullopt)), [&](const Meta& m) {
                      if (m.signature != sig || m.size != root_bytes)
                        throw Error(ErrorCode::kInvalidArgument,
                                    col.what() +
                                        ": rank 0 passed other buffers (sizes, types, "
                                        "order or reduce flags) than rank " +
                                        std::to_string(col.rank()));
                    });
    return;
  }
  const uint32_t me = col.rank(), n = col.world();
  auto publishes = [&](uint32_t r) { return r == 0 || reduce; };
  auto avg_base = [&](uint32_t r) { return r == 0 ? root_bytes : 0; };
  auto seg_size = [&](uint32_t r) { return avg_base(r) + (reduce ? avg_bytes : 0); };

  if (publishes(me)) {
    if (local) col.fail(*local);
    std::vector<Piece> parts;  // in increasing offset order
    if (me == 0)
      for (size_t i : from_root) parts.push_back({buffers[i].data, buffers[i].size, offset[i]});
    if (reduce)
      for (size_t i : averaged)
        parts.push_back({buffers[i].data, buffers[i].size, avg_base(me) + offset[i]});
    col.publish(parts, seg_size(me), sig);
  }
  col.ready();
  // Every rank reads every publisher's metadata, so all agree on errors.
  std::vector<Meta> metas(n);
  for (uint32_t r = 0; r < n; ++r)
    if (r != me && publishes(r)) metas[r] = col.meta(r);

  read_then_done(col, [&] {
    if (local) throw *local;
    std::vector<std::unique_ptr<Segment>> segs(n);
    std::vector<std::unique_ptr<ChunkSums>> sums(n);
    for (uint32_t r = 0; r < n; ++r) {
      if (r == me || !publishes(r)) continue;
      const Meta& m = metas[r];
      if (m.signature != sig || m.size != seg_size(r))
        throw Error(ErrorCode::kInvalidArgument,
                    col.what() + ": rank " + std::to_string(r) +
                        " passed other buffers (sizes, types, order or reduce flags) than rank " +
                        std::to_string(me));
      if (!m.size) continue;
      segs[r] = std::make_unique<Segment>();
      segs[r]->open(m.segment, m.size);
      sums[r] = std::make_unique<ChunkSums>(m.algo, m.chunk, &m.sums,
                                            col.what() + " from rank " + std::to_string(r));
    }
    // Segments are read front to back, so the checksums run in order.
    if (me != 0 && segs[0])
      for (size_t i : from_root)
        copy_verified(*sums[0], *segs[0], offset[i], buffers[i].data, buffers[i].size);
    if (reduce) {
      std::vector<double> acc(kReduceBlock / 4);
      std::vector<const uint8_t*> src(n);
      for (size_t i : averaged) {
        const auto& b = buffers[i];
        auto* d = static_cast<uint8_t*>(b.data);
        for (size_t o = 0; o < b.size; o += kReduceBlock) {
          size_t len = std::min(kReduceBlock, b.size - o);
          for (uint32_t r = 0; r < n; ++r) {
            if (r == me) {
              src[r] = d + o;  // this rank's own values: its buffer, as published
              continue;
            }
            size_t at = avg_base(r) + offset[i] + o;
            auto& s = *sums[r];
            if (s.pos() < at) s.feed(segs[r]->data() + s.pos(), at - s.pos());
            s.feed(segs[r]->data() + at, len);
            src[r] = segs[r]->data() + at;
          }
          if (elem_size(b.type) == 4)
            average_block<float>(src, d + o, len / 4, acc.data());
          else
            average_block<double>(src, d + o, len / 8, acc.data());
        }
      }
    }
    for (uint32_t r = 0; r < n; ++r)
      if (segs[r]) finish_verified(*sums[r], *segs[r]);
  });
}

}  // namespace muster
