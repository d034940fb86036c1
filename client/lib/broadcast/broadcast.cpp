// Model broadcast and averaging on one node: muster::broadcast and
// muster::sync_model.
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
// (see pool.hpp); so does sync_model without reduce flags, rank
// 0's buffers packed as one broadcast (local_broadcast, bcast::Layout).
// Same metadata, checksums and barriers; a reader that may not open the
// pool adds to a counter before the done barrier, and if any did, every
// rank then runs a second round through a segment. Both
// paths give the same guarantees: a reader claims success only after the
// done barrier, which fails when any rank has died, and only with verified
// bytes. By default the pool is streamed (see stream.hpp).
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

#include "collective.hpp"
#include "local.hpp"
#include "muster/broadcast.hpp"
#include "nodes.hpp"
#include "session.hpp"

namespace muster {

using namespace bcast;

namespace {

constexpr size_t kReduceBlock = size_t{64} << 10;

size_t align_up(size_t v) {
  return (v + kAlign - 1) & ~(kAlign - 1);
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

size_t elem_size(Buffer::Type t) {
  switch (t) {
    case Buffer::Type::kFloat32:
      return 4;
    case Buffer::Type::kFloat64:
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

// How sync_model packs the buffers: each is taken from rank 0 (packed
// first, in rank 0's segment only) or averaged (packed after that, in every
// rank's segment); a signature of the layout lets ranks check they agree.
struct ModelPlan {
  std::vector<size_t> from_root, averaged;
  std::vector<size_t> offset;  // of each buffer in its part
  size_t root_bytes = 0, avg_bytes = 0;
  uint64_t sig = 0;
  std::optional<Error> local;  // reported through the collective, see broadcast()
};

ModelPlan plan_model(const std::vector<Buffer>& buffers, bool reduce_parameters,
                     bool reduce_buffers, uint32_t rank) {
  ModelPlan p;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto& b = buffers[i];
    bool avg =
        b.type != Buffer::Type::kBytes && (b.is_parameter ? reduce_parameters : reduce_buffers);
    if (!p.local && !b.data && b.size)
      p.local =
          Error(ErrorCode::kInvalidArgument, "sync_model buffer " + std::to_string(i) +
                                                 " has NULL data on rank " + std::to_string(rank));
    if (!p.local && avg && b.size % elem_size(b.type))
      p.local = Error(ErrorCode::kInvalidArgument,
                      "sync_model buffer " + std::to_string(i) + " has " + std::to_string(b.size) +
                          " bytes, not a whole number of " + std::to_string(elem_size(b.type)) +
                          "-byte floats");
    (avg ? p.averaged : p.from_root).push_back(i);
  }
  p.offset.resize(buffers.size());
  Hasher sh(kXxh3);
  auto sig_add = [&](uint64_t v) { sh.update(reinterpret_cast<const uint8_t*>(&v), 8); };
  for (size_t i : p.from_root) {
    p.offset[i] = p.root_bytes;
    p.root_bytes = align_up(p.root_bytes + buffers[i].size);
    sig_add(i), sig_add(buffers[i].size), sig_add(0);
  }
  for (size_t i : p.averaged) {
    p.offset[i] = p.avg_bytes;
    p.avg_bytes = align_up(p.avg_bytes + buffers[i].size);
    sig_add(i), sig_add(buffers[i].size), sig_add(1 + static_cast<uint64_t>(buffers[i].type));
  }
  p.sig = sh.final();
  return p;
}

// sync_model with averaging: every rank publishes its averaged buffers (rank
// 0 its others too) and reads everyone else's.
class Averaging {
 public:
  Averaging(Collective& col, const std::vector<Buffer>& buffers, const ModelPlan& p)
      : col_(col), buffers_(buffers), p_(p), me_(col.rank()), n_(col.world()) {}

  void run() {
    if (p_.local) col_.fail(*p_.local);
    std::vector<Piece> parts;  // in increasing offset order
    if (me_ == 0)
      for (size_t i : p_.from_root)
        parts.push_back({buffers_[i].data, buffers_[i].size, p_.offset[i]});
    for (size_t i : p_.averaged)
      parts.push_back({buffers_[i].data, buffers_[i].size, avg_base(me_) + p_.offset[i]});
    col_.publish(parts, seg_size(me_), p_.sig);
    col_.ready();
    // Every rank reads every publisher's metadata, so all agree on errors.
    metas_.resize(n_);
    for (uint32_t r = 0; r < n_; ++r)
      if (r != me_) metas_[r] = col_.meta(r);
    read_then_done(col_, [&] { read(); });
  }

 private:
  size_t avg_base(uint32_t r) const { return r == 0 ? p_.root_bytes : 0; }
  size_t seg_size(uint32_t r) const { return avg_base(r) + p_.avg_bytes; }

  void read() {
    if (p_.local) throw *p_.local;
    segs_.resize(n_);
    sums_.resize(n_);
    for (uint32_t r = 0; r < n_; ++r) {
      if (r == me_) continue;
      const Meta& m = metas_[r];
      if (m.signature != p_.sig || m.size != seg_size(r))
        throw Error(ErrorCode::kInvalidArgument,
                    col_.what() + ": rank " + std::to_string(r) +
                        " passed other buffers (sizes, types, order or reduce flags) than rank " +
                        std::to_string(me_));
      if (!m.size) continue;
      segs_[r] = std::make_unique<Segment>();
      segs_[r]->open(m.segment, m.size);
      sums_[r] = std::make_unique<ChunkSums>(m.algo, m.chunk, &m.sums,
                                             col_.what() + " from rank " + std::to_string(r));
    }
    // Segments are read front to back, so the checksums run in order.
    if (me_ != 0 && segs_[0])
      for (size_t i : p_.from_root)
        copy_verified(*sums_[0], *segs_[0], p_.offset[i], buffers_[i].data, buffers_[i].size);
    std::vector<double> acc(kReduceBlock / 4);
    for (size_t i : p_.averaged) average(i, acc);
    for (uint32_t r = 0; r < n_; ++r)
      if (segs_[r]) finish_verified(*sums_[r], *segs_[r]);
  }

  void average(size_t i, std::vector<double>& acc) {
    const auto& b = buffers_[i];
    auto* d = static_cast<uint8_t*>(b.data);
    std::vector<const uint8_t*> src(n_);
    for (size_t o = 0; o < b.size; o += kReduceBlock) {
      size_t len = std::min(kReduceBlock, b.size - o);
      for (uint32_t r = 0; r < n_; ++r) {
        if (r == me_) {
          src[r] = d + o;  // this rank's own values: its buffer, as published
          continue;
        }
        size_t at = avg_base(r) + p_.offset[i] + o;
        auto& s = *sums_[r];
        if (s.pos() < at) s.feed(segs_[r]->data() + s.pos(), at - s.pos());
        s.feed(segs_[r]->data() + at, len);
        src[r] = segs_[r]->data() + at;
      }
      if (elem_size(b.type) == 4)
        average_block<float>(src, d + o, len / 4, acc.data());
      else
        average_block<double>(src, d + o, len / 8, acc.data());
    }
  }

  Collective& col_;
  const std::vector<Buffer>& buffers_;
  const ModelPlan& p_;
  const uint32_t me_, n_;
  std::vector<Meta> metas_;
  std::vector<std::unique_ptr<Segment>> segs_;
  std::vector<std::unique_ptr<ChunkSums>> sums_;
};

}  // namespace

void broadcast(Client& client, void* data, size_t size, uint32_t root) {
  const auto& info = client.rank_info();
  detail::Session& session = detail::session_of(client);
  if (root >= info.world_size)
    throw Error(ErrorCode::kInvalidArgument, "broadcast root " + std::to_string(root) +
                                                 " is outside the job's world size " +
                                                 std::to_string(info.world_size));
  if (info.world_size == 1) {
    if (!data && size) throw Error(ErrorCode::kInvalidArgument, "broadcast data is NULL");
    return;
  }
  if (info.num_nodes > 1)  // through the daemons, then shared memory in each node
    return broadcast_across_nodes(client, session, {{data, size, 0}}, size, size, root,
                                  "broadcast");
  // Local errors go through the collective, so the other ranks learn of
  // them instead of waiting for a timeout.
  Collective col(client, "broadcast");
  std::optional<Error> local;
  if (!data && size)
    local = Error(ErrorCode::kInvalidArgument,
                  col.what() + ": data is NULL on rank " + std::to_string(col.rank()));
  const std::vector<Piece> pieces{{data, size, 0}};
  local_broadcast(col, Layout(pieces, size), size, root, local,
                  std::chrono::milliseconds(session.wait_ms(std::nullopt)), [&](const Meta& m) {
                    if (m.size != size)
                      throw Error(ErrorCode::kInvalidArgument,
                                  col.what() + ": this rank's buffer has " + std::to_string(size) +
                                      " bytes, root " + std::to_string(root) + "'s " +
                                      std::to_string(m.size));
                  });
}

void sync_model(Client& client, const std::vector<Buffer>& buffers, bool reduce_parameters,
                bool reduce_buffers) {
  const auto& info = client.rank_info();
  detail::Session& session = detail::session_of(client);
  const ModelPlan p = plan_model(buffers, reduce_parameters, reduce_buffers, info.rank);
  if (info.world_size == 1) {
    if (p.local) throw *p.local;
    return;
  }
  std::vector<Piece> pieces;  // rank 0's part
  for (size_t i : p.from_root) pieces.push_back({buffers[i].data, buffers[i].size, p.offset[i]});
  if (info.num_nodes > 1) {
    if (!p.averaged.empty())
      throw Error(ErrorCode::kInvalidArgument,
                  "sync_model cannot average buffers of a job that spans nodes (job '" + info.job +
                      "' has " + std::to_string(info.num_nodes) +
                      "): use an all-reduce of your collective library (NCCL, gloo) for that; "
                      "sync_model without reduce flags broadcasts rank 0's buffers");
    return broadcast_across_nodes(client, session, pieces, p.root_bytes, p.sig, 0, "sync_model",
                                  p.local);
  }
  Collective col(client, "sync_model");
  if (!p.averaged.empty()) return Averaging(col, buffers, p).run();
  // Rank 0's buffers, packed: a broadcast (through its ring when large).
  local_broadcast(col, Layout(pieces, p.root_bytes), p.sig, 0, p.local,
                  std::chrono::milliseconds(session.wait_ms(std::nullopt)), [&](const Meta& m) {
                    if (m.signature != p.sig || m.size != p.root_bytes)
                      throw Error(ErrorCode::kInvalidArgument,
                                  col.what() +
                                      ": rank 0 passed other buffers (sizes, types, "
                                      "order or reduce flags) than rank " +
                                      std::to_string(col.rank()));
                  });
}

}  // namespace muster
