// Broadcast requests of local ranks that name their pool (proto::PoolRef,
// cluster/broadcast/pool_files.hpp). A push's chunk is read from the root's pool
// straight into the Forward that carries it to the coordinator (one copy
// where the bytes used to cross the local socket and be copied twice more
// into frames); a pulled chunk is written into the pulling rank's pool when
// its answer comes, and the rank is answered with a bcast_chunk without
// bytes, which it checks in its pool against the root's checksum. The
// coordinator never sees a pool: it gets pushes with bytes and pulls
// without a reference, as from any node.
#include <algorithm>

#include "cluster/node_links.hpp"
#include "log.hpp"
#include "protocol/codec.hpp"

namespace muster::daemon {

using proto::MsgType;

bool NodeLinks::forward_bcast(const ReplyTo& to, const Job& job, const proto::Envelope& env,
                              LinkPending& p, std::vector<Outgoing>& out) {
  const auto type = static_cast<MsgType>(env.type);
  // Along the chain, chunks come from the node before, always as the
  // shared frame (chain_broadcasts.cpp); a rank without a pool gets a copy.
  const bool chain = !job.cluster->chain_prev.empty();
  const std::string& link = chain ? job.cluster->chain_prev : job.cluster->coordinator;
  if (type == MsgType::kBcastPull) {
    auto m = proto::BcastPull::unpack(env.payload);
    if (m.shared)
      throw Error(ErrorCode::kInvalidArgument,
                  "bcast_pull: `shared` is for a node daemon to ask its coordinator");
    if (!m.pool.set() && !chain) return false;
    const std::string key = shared_pull_key(m.job, m.generation, m.seq, m.root, m.index);
    if (pulling(key))
      throw Error(ErrorCode::kConflict, "chunk " + std::to_string(m.index) +
                                            " of this broadcast is being pulled already");
    if (m.pool.set()) {
      const uint64_t at = m.index * m.chunk;
      p.into = pools_.open(to.peer_pid, to.peer_uid, m.pool, m.pool.offset + m.size, true);
      p.into_at = m.pool.offset + at;
      p.into_index = m.index;
      p.into_bytes = std::min(m.chunk, m.size - at);
    }
    m.pool = {};
    m.shared = true;
    pull_shared(link, key, std::move(p),
                proto::Forward{job.id, job.generation, proto::encode(0, m), chain}, out);
    return true;
  }
  if (type != MsgType::kBcastPush) return false;
  auto m = proto::BcastPushView::unpack(env.payload);
  if (!m.pool.set()) return false;
  const uint64_t at = m.index * m.chunk, n = std::min(m.chunk, m.size - at);
  auto file = pools_.open(to.peer_pid, to.peer_uid, m.pool, m.pool.offset + m.size, false);
  const proto::BcastPush head{m.job,   m.generation, m.seq, m.root, m.size,
                              m.chunk, m.index,      m.sum, {},     m.timeout_ms};
  codec::Buffer inner;
  codec::Packer ip(inner);
  proto::pack_envelope_head(ip, 0, env.type);
  head.pack_head(ip, n);
  const proto::Forward f{job.id, job.generation, {}};
  auto make = [&](uint64_t id) {
    codec::Buffer outer;
    codec::Packer op(outer);
    proto::pack_envelope_head(op, id, static_cast<uint16_t>(MsgType::kForward));
    f.pack_head(op, inner.size() + n);
    std::string frame;
    frame.reserve(outer.size() + inner.size() + n);
    frame.append(outer.data(), outer.size());
    frame.append(inner.data(), inner.size());
    const size_t bytes_at = frame.size();
    frame.resize(bytes_at + n);
    file->read(m.pool.offset + at, frame.data() + bytes_at, n);
    return frame;
  };
  send_link_with(link, std::move(p), make, out);
  return true;
}

void NodeLinks::send_up(const std::string& link, LinkPending p, const proto::Forward& f,
                        std::vector<Outgoing>& out) {
  send_link(link, std::move(p), f, out);
}

bool NodeLinks::pulling(const std::string& key) const {
  auto it = shared_pulls_.find(key);
  if (it == shared_pulls_.end()) return false;
  auto l = links_.find(it->second.first);
  return l != links_.end() && l->second.pending.count(it->second.second);
}

void NodeLinks::pull_shared(const std::string& link, const std::string& key, LinkPending p,
                            const proto::Forward& f, std::vector<Outgoing>& out) {
  shared_pulls_[key] = {link, send_link(link, std::move(p), f, out)};
}

void NodeLinks::fail_in_flight(const std::string& link, const std::string& job, ErrorCode code,
                               const std::string& why, std::vector<Outgoing>& out) {
  auto lit = links_.find(link);
  if (lit == links_.end()) return;
  std::erase_if(lit->second.pending, [&](const auto& kv) {
    const LinkPending& p = kv.second;
    if (!p.bcast || p.job != job || p.kind != LinkPending::Kind::kForward) return false;
    fail(p.to, code, why, out);
    return true;
  });
}

uint64_t NodeLinks::shared_pull(const std::string& link, const proto::Envelope& env) {
  auto ch = proto::BcastChunkView::unpack(env.payload);
  auto it = shared_pulls_.find(shared_pull_key(ch.job, ch.generation, ch.seq, ch.root, ch.index));
  if (it == shared_pulls_.end() || it->second.first != link) return 0;
  uint64_t id = it->second.second;
  shared_pulls_.erase(it);
  return id;
}

void NodeLinks::forget_shared_pulls() {
  std::erase_if(shared_pulls_, [&](const auto& kv) {
    auto l = links_.find(kv.second.first);
    return l == links_.end() || !l->second.pending.count(kv.second.second);
  });
}

void NodeLinks::pool_answer(const LinkPending& p, const proto::Envelope& env,
                            std::vector<Outgoing>& out) {
  if (static_cast<MsgType>(env.type) != MsgType::kBcastChunk) {  // an error: as it came
    out.push_back({p.to, proto::encode_object(p.to.request_id, env.type, env.payload), {}});
    return;
  }
  auto ch = proto::BcastChunkView::unpack(env.payload);
  if (ch.written || ch.index != p.into_index || ch.data.size() != p.into_bytes)
    throw Error(ErrorCode::kBadMessage, "chunk " + std::to_string(ch.index) + " of " +
                                            std::to_string(ch.data.size()) + " bytes for chunk " +
                                            std::to_string(p.into_index) + " of " +
                                            std::to_string(p.into_bytes));
  try {
    p.into->write(p.into_at, ch.data.data(), ch.data.size());
  } catch (const Error& e) {
    return fail(p.to, e.code(), e.what(), out);
  }
  proto::BcastChunk written;
  written.index = ch.index, written.sum = ch.sum, written.written = true;
  out.push_back({p.to, proto::encode(p.to.request_id, written), {}});
}

}  // namespace muster::daemon
