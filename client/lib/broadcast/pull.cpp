// A node's relay rank in a broadcast across nodes (see nodes.cpp):
// it pulls every chunk through its node's daemon, which writes each into
// the relay's stream when it can open it (daemon/cluster/bcast_pools.cpp),
// else passes the bytes on; the relay checks each against the root's
// checksum, copies it into its own buffers and publishes it to its node's
// readers.
#include <algorithm>
#include <memory>
#include <string>

#include "checksum.hpp"
#include "node_part.hpp"
#include "stream.hpp"
#include "wire.hpp"

namespace muster::bcast {

// A node's relay: pulls every chunk through this node's daemon into its
// stream (and its buffers).
void NodeBroadcast::pull() {
  Meta rm = decode(c_.get(root_key_, wait_));
  const size_t size = rm.size;
  bool joined = size > 0;  // in the coordinator's list of pulling nodes
  try {
    if (rm.status != ErrorCode::kOk)
      throw Error(rm.status,
                  what_ + " failed on rank " + std::to_string(root_) + ": " + rm.message);
    if (size && (rm.chunk < proto::kMinBcastChunk || rm.chunk > proto::kMaxBcastChunk))
      throw Error(ErrorCode::kInternal, from_ + ": chunks of " + std::to_string(rm.chunk) +
                                            " bytes are outside the protocol's limits");
    agrees(rm);
    if (failed_) throw *failed_;  // no stream for this node's readers
    // A stream made for another size or chunking cannot carry the root's
    // bytes (agrees() said why, unless the chunking differs).
    if (pool_ ? mine_.size != size || mine_.chunk != rm.chunk
              : info_.local_world_size > 1 && size > 0)
      throw local_
          ? *local_
          : Error(ErrorCode::kInternal, from_ + ": this node's stream has chunks of " +
                                            std::to_string(mine_.chunk) + " bytes, the root's " +
                                            std::to_string(rm.chunk));
    // With nobody to feed and nothing to keep, stop pulling now.
    if (local_ && !pool_) throw *local_;
    pull_chunks(rm);
    if (joined) leave(size, rm.chunk, "");
    joined = false;
  } catch (const std::exception& e) {
    if (pool_) stream_abort(pool_->data(), mine_.tag);
    if (joined) leave(size, rm.chunk, e.what());
    throw;
  }
}

void NodeBroadcast::pull_chunks(const Meta& rm) {
  const size_t size = rm.size;
  const size_t chunks = (size + rm.chunk - 1) / rm.chunk;
  InFlight inflight{conn_, {}};
  size_t next = 0;
  Hasher hs(rm.algo);
  // The daemon writes the chunks into this rank's stream, if it can: the
  // first pull goes alone to find out.
  bool by_pool = pool_ != nullptr;
  auto pull_one = [&](size_t k, size_t index, bool into) {
    proto::BcastPull m{info_.job, info_.generation, seq_, root_, info_.node_rank,
                       size,      rm.chunk,         k,    index, wait_.count()};
    if (into) m.pool = pool_ref();
    return conn_.send(m);
  };
  auto damaged = [&](size_t k, size_t o) {
    return Error(ErrorCode::kInternal,
                 from_ + ": chunk " + std::to_string(k) + " (from byte " + std::to_string(o) +
                     ") does not match the root's checksum: it was damaged on the way");
  };
  for (size_t k = 0; k < chunks; ++k) {
    for (; next < chunks && next < k + (k == 0 && by_pool ? 1 : kInFlight); ++next)
      inflight.ids.push_back(pull_one(k, next, by_pool));
    std::unique_ptr<detail::Connection::Reply> got;
    try {
      got = conn_.await(inflight.pop(), proto::MsgType::kBcastChunk, wait_);
    } catch (const Error& e) {
      if (k != 0 || !by_pool || !pool_refused(e.code())) throw;
      by_pool = false;  // it cannot open the pool: the bytes come through the socket
      got = conn_.await(pull_one(0, 0, false), proto::MsgType::kBcastChunk, wait_);
    }
    auto ch = proto::BcastChunkView::unpack(got->env.payload);
    const size_t o = k * rm.chunk, n = std::min<size_t>(rm.chunk, size - o);
    if (ch.written) {  // by the daemon, into the stream: checked there, then published
      if (ch.index != k || !by_pool)
        throw Error(ErrorCode::kBadMessage, from_ + ": the daemon wrote chunk " +
                                                std::to_string(ch.index) + " for chunk " +
                                                std::to_string(k) + " into this rank's stream" +
                                                (by_pool ? "" : ", which it was not asked to"));
      const uint8_t* in_pool = pool_->data() + mine_.offset + o;
      hs.reset();
      if (local_)
        hs.update(in_pool, n);
      else
        layout_.scatter(o, in_pool, n, &hs);
      if (hs.final() != ch.sum) throw damaged(k, o);
      stream_publish(pool_->data(), k, ch.sum, k + 1 == chunks);
      continue;
    }
    if (ch.index != k || ch.data.size() != n)
      throw Error(ErrorCode::kBadMessage, from_ + ": the daemon sent chunk " +
                                              std::to_string(ch.index) + " of " +
                                              std::to_string(ch.data.size()) + " bytes for chunk " +
                                              std::to_string(k) + " of " + std::to_string(n));
    auto* bytes = reinterpret_cast<const uint8_t*>(ch.data.data());
    hs.reset();
    if (pool_)
      hs.copy_update(pool_->data() + mine_.offset + o, bytes, n);
    else
      layout_.scatter(o, bytes, n, &hs);
    if (hs.final() != ch.sum) throw damaged(k, o);
    if (pool_) {
      stream_publish(pool_->data(), k, ch.sum, k + 1 == chunks);
      if (!local_) layout_.scatter(o, pool_->data() + mine_.offset + o, n, nullptr);
    }
  }
}

}  // namespace muster::bcast
