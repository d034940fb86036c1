// A broadcast inside one node (see broadcast.cpp): the root publishes a
// segment, its pool or a stream; the other ranks read it, and a second round
// through segments serves readers that may not open the pool.
#include "local.hpp"

#include <cstdlib>
#include <string_view>

namespace muster::bcast {

namespace {

constexpr size_t kPoolMin = size_t{1} << 20;  // smaller broadcasts use a fresh segment

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

// The root: publishes its bytes by the path MUSTER_BCAST picks, writes its
// stream after the ready barrier, and takes part in a second round when a
// reader could not open its pool.
void root_side(Collective& col, const Layout& layout, uint64_t signature,
               const std::optional<Error>& local, std::chrono::milliseconds wait) {
  const size_t size = layout.total();
  const std::vector<Piece>& parts = layout.pieces();
  if (local) col.fail(*local);
  const BroadcastPath path = broadcast_path();
  std::shared_ptr<Pool> stream;
  Meta sm;
  if (size && (path == BroadcastPath::kStream || path == BroadcastPath::kWhole ||
               (path == BroadcastPath::kAuto && size >= kPoolMin)))
    stream = col.publish_stream(size, signature, path == BroadcastPath::kWhole, sm);
  const uint8_t* whole = size ? layout.in_one(0, size) : nullptr;  // one buffer, no gaps
  const bool pooled =
      stream || (whole && path == BroadcastPath::kPool && col.publish_pool(whole, size, signature));
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
}

// A reader of the root's published bytes.
class Reader {
 public:
  Reader(Collective& col, const Layout& layout, uint32_t root, const std::optional<Error>& local,
         std::chrono::milliseconds wait, const std::function<void(const Meta&)>& agree)
      : col_(col),
        layout_(layout),
        root_(root),
        local_(local),
        wait_(wait),
        agree_(agree),
        from_(col.what() + " from rank " + std::to_string(root)) {}

  // A root that dies leaves its segment (it unlinks it only when it lives
  // to end the collective): the readers that see it die remove it.
  void run() {
    try {
      read();
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kPeerExited) col_.remove_orphans(root_);
      throw;
    }
  }

 private:
  void read() {
    col_.ready();
    m_ = col_.meta(root_);
    if (m_.pooled == Pooled::kSegment) {
      read_then_done(col_, [&] {
        check();
        from_segment(m_);
      });
      return;
    }
    try {
      from_pool();
    } catch (...) {
      View::drop(col_.job(), col_.rank(), root_);  // root may be gone: let its pool go
      throw;
    }
  }

  void check() {
    if (local_) throw *local_;
    agree_(m_);
  }

  // Reads every piece from the packed bytes at p, checking them all.
  void copy_all(ChunkSums& sums, const uint8_t* p) {
    const size_t size = layout_.total();
    for (const auto& piece : layout_.pieces()) {
      sums.feed(p + sums.pos(), piece.offset - sums.pos());  // the gap before it
      sums.copy_feed(piece.data, p + piece.offset, piece.size);
    }
    sums.feed(p + sums.pos(), size - sums.pos());
    sums.finish();
  }

  void from_segment(const Meta& sm) {
    const size_t size = layout_.total();
    if (!size) return;
    if (sm.size != size)
      throw Error(ErrorCode::kInternal, from_ + ": the segment has another size");
    Segment seg;
    seg.open(sm.segment, sm.size);
    ChunkSums sums(sm.algo, sm.chunk, &sm.sums, from_);
    copy_all(sums, seg.data());
  }

  // From root's pool; a reader that may not open it says so, and then every
  // rank takes part in a second round through a segment (see Collective).
  void from_pool() {
    bool need = false, reading = false;
    std::exception_ptr err;
    auto view = View::of(col_.job(), col_.rank(), root_);
    try {
      check();
      if (!view->attach(m_)) {
        need = true;
        col_.need_segment();
      } else if (m_.pooled == Pooled::kStream) {
        // false: the root gave the ring up because another reader could not
        // open it; the second round brings the bytes.
        reading = true;
        need = !stream_read(view->data(), m_, layout_, col_.rank(), wait_, from_);
      } else {
        ChunkSums sums(m_.algo, m_.chunk, &m_.sums, from_);
        copy_all(sums, view->data());
      }
    } catch (...) {
      err = std::current_exception();
      if (m_.ring && !reading) leave_ring(*view);
    }
    try {
      col_.done();
    } catch (const Error& e) {
      if (err && e.code() != ErrorCode::kPeerExited) std::rethrow_exception(err);
      throw;
    }
    // Past the done barrier, every rank asks whether a second round follows.
    if (col_.segment_needed()) {
      col_.second_round();
      col_.ready();
      Meta sm = col_.meta(root_);
      read_then_done(col_, [&] {
        if (need) from_segment(sm);
      });
    }
    if (err) std::rethrow_exception(err);
  }

  // A ring's root waits for every reader: one that will not read says so,
  // in the ring or else through the store (stream_read did already).
  void leave_ring(View& view) {
    bool left = false;
    try {
      if (view.attach(m_)) {
        ring_report(view.data(), m_, col_.rank(), kGone);
        left = true;
      }
    } catch (...) {
    }
    try {
      if (!left) col_.need_segment();  // the root gives the ring up for a second round
    } catch (...) {
      // the daemon is gone: the root's stall check fails too
    }
  }

  Collective& col_;
  const Layout& layout_;
  const uint32_t root_;
  const std::optional<Error>& local_;
  const std::chrono::milliseconds wait_;
  const std::function<void(const Meta&)>& agree_;
  const std::string from_;
  Meta m_;
};

}  // namespace

void local_broadcast(Collective& col, const Layout& layout, uint64_t signature, uint32_t root,
                     const std::optional<Error>& local, std::chrono::milliseconds wait,
                     const std::function<void(const Meta&)>& agree) {
  if (col.rank() == root) return root_side(col, layout, signature, local, wait);
  Reader(col, layout, root, local, wait, agree).run();
}

}  // namespace muster::bcast
