// ChainBroadcasts' serving side (chain_broadcasts.hpp, bcast_chain.hpp):
// the next node's pulls and leave, which come from a peer (a Forward with
// relay set: relays.cpp passes them here), and the chunks this node holds
// for it.
#include <algorithm>

#include "cluster/broadcast/bcast_relay.hpp"
#include "cluster/broadcast/chain_broadcasts.hpp"
#include "log.hpp"

namespace muster::daemon {

using proto::MsgType;

void ChainBroadcasts::serve(ChainCast& cc, const ReplyTo& to, const ChainCast::Frame& f,
                            std::vector<Outgoing>& out) {
  Outgoing o{to, {}};
  o.held = f.held;
  o.body = f.body;
  out.push_back(std::move(o));
  cc.passed += f.body.size();
}

void ChainBroadcasts::hold(ChainCast& cc, uint64_t index, ChainCast::Frame f,
                           std::vector<Outgoing>& out) {
  if (!cc.has_down || cc.down_left || index < cc.down_have || cc.held.count(index)) return;
  const ChainCast::Frame& held = cc.held.emplace(index, std::move(f)).first->second;
  std::erase_if(cc.down_pulls, [&](const ChainCast::Parked& p) {
    if (p.index != index) return false;
    serve(cc, p.to, held, out);
    return true;
  });
}

void ChainBroadcasts::self_pull(ChainCast& cc, uint64_t index, std::vector<Outgoing>& out) {
  const Job* job = jobs_.find(cc.job);
  if (!job || !job->cluster || cc.self_pulls.count(index)) return;
  const ClusterInfo& c = *job->cluster;
  const std::string key = shared_pull_key(cc.job, cc.generation, cc.seq, cc.root, index);
  cc.self_pulls.insert(index);
  // A pull of the relay's for it still in flight brings it (ChainBroadcasts::got holds
  // every shared frame): the node before would refuse a second one.
  if (links_.pulling(key)) return;
  proto::BcastPull m;
  m.job = cc.job, m.generation = cc.generation, m.seq = cc.seq, m.root = cc.root;
  m.node_rank = c.node_rank, m.size = cc.size, m.chunk = cc.chunk;
  m.have = std::min(cc.down_have, index), m.index = index, m.shared = true;
  m.timeout_ms = 600000;  // the next node's pull times out first
  LinkPending p{LinkPending::Kind::kNotice, {}, cc.job, key};
  p.bcast = true;
  links_.pull_shared(c.chain_prev, key, std::move(p),
                     proto::Forward{cc.job, cc.generation, proto::encode(0, m), true}, out);
}

void ChainBroadcasts::self_refused(const LinkPending& p, const proto::Envelope& env,
                                   std::vector<Outgoing>& out) {
  auto it = chains_.find(p.job);
  if (it == chains_.end() || static_cast<MsgType>(env.type) != MsgType::kErrorReply) return;
  ChainCast& cc = it->second;
  // Only a self pull of this very broadcast (a late refusal of one before
  // it, say after its leave, is moot).
  bool mine = false;
  for (uint64_t index : cc.self_pulls)
    mine |= p.key == shared_pull_key(cc.job, cc.generation, cc.seq, cc.root, index);
  if (!mine) return;
  auto e = proto::ErrorReply::unpack(env.payload);
  const auto code = e.code == 0 ? ErrorCode::kBadMessage : static_cast<ErrorCode>(e.code);
  fail_cast(cc, code, chain_name(cc) + ": the node before refused a pull: " + e.message, true, out);
}

void ChainBroadcasts::from_down(const ReplyTo& to, Job& job, const proto::Envelope& env,
                                std::vector<Outgoing>& out) {
  const ClusterInfo& c = *job.cluster;
  if (c.chain_prev.empty())
    throw Error(ErrorCode::kUnavailable, "the broadcasts of job '" + job.id +
                                             "' go through its coordinator, not node to node");
  const uint32_t next = (c.node_rank + 1) % c.num_nodes;
  auto not_next = [&](uint32_t node) {
    return Error(ErrorCode::kPermissionDenied, "node " + std::to_string(node) + " of job '" +
                                                   job.id + "' does not pull from node " +
                                                   std::to_string(c.node_rank) + " (node " +
                                                   std::to_string(next) + " does)");
  };
  if (static_cast<MsgType>(env.type) == MsgType::kBcastLeave) {
    auto m = proto::BcastLeave::unpack(env.payload);
    if (m.node_rank != next) throw not_next(m.node_rank);
    ChainCast* cc = nullptr;
    try {
      cc = &cast(job, m.generation, m.seq, m.root, m.size, m.chunk, false, out);
    } catch (const Error&) {
      if (m.why.empty()) throw;  // a node that gave up on what failed here: nothing to undo
    }
    if (cc) {
      cc->down_left = true;
      // A node that failed (its rank died, say): the nodes before fail too.
      if (!m.why.empty())
        fail_cast(*cc, ErrorCode::kPeerExited,
                  chain_name(*cc) + ": node " + std::to_string(next) + " gave up: " + m.why, true,
                  out);
      for (const auto& p : cc->down_pulls)
        refuse(p.to, ErrorCode::kConflict,
               chain_name(*cc) + ": node " + std::to_string(next) + " left it", out);
      cc->down_pulls.clear();
      if (m.why.empty()) advance(*cc, out);
    }
    out.push_back({to, proto::encode(to.request_id, proto::Ok{}), {}});
    return;
  }
  auto m = proto::BcastPull::unpack(env.payload);
  if (m.node_rank != next) throw not_next(m.node_rank);
  if (!m.shared || m.pool.set())
    throw Error(ErrorCode::kInvalidArgument,
                "a node daemon pulls shared chunks, without a rank's pool");
  // Checked before the broadcast is made here: a refused pull changes nothing.
  if (!chain_role(job, m.root).has_down)
    throw Error(ErrorCode::kInvalidArgument, "bcast_pull: node " + std::to_string(next) +
                                                 " holds rank " + std::to_string(m.root) +
                                                 ", the root: it pulls nothing");
  if (m.index >= m.have + 2 * bcast_window(m.chunk))
    throw Error(ErrorCode::kTooLarge, "bcast_pull: chunk " + std::to_string(m.index) +
                                          " asked for while holding only " +
                                          std::to_string(m.have) + " chunk(s)");
  ChainCast& cc = cast(job, m.generation, m.seq, m.root, m.size, m.chunk, false, out);
  if (cc.down_left)
    throw Error(ErrorCode::kConflict,
                chain_name(cc) + ": node " + std::to_string(next) + " has left it");
  // At most one pull a chunk waits: what waits is bounded by the window.
  for (const auto& p : cc.down_pulls)
    if (p.index == m.index)
      throw Error(ErrorCode::kConflict,
                  chain_name(cc) + ": chunk " + std::to_string(m.index) + " is asked for already");
  cc.down_have = std::max(cc.down_have, m.have);
  advance(cc, out);
  if (auto h = cc.held.find(m.index); h != cc.held.end())
    serve(cc, to, h->second, out);
  else if (m.index < cc.down_have)
    throw Error(ErrorCode::kConflict, chain_name(cc) + ": chunk " + std::to_string(m.index) +
                                          " was dropped: node " + std::to_string(next) +
                                          " said it holds it");
  else {
    cc.down_pulls.push_back({to, m.index, chain_deadline(m.timeout_ms)});
    if (cc.gave_up) self_pull(cc, m.index, out);
  }
}

void ChainBroadcasts::got(const proto::Envelope& env, void* data, size_t size,
                          std::shared_ptr<void>& held, std::vector<Outgoing>& out) {
  auto ch = proto::BcastChunkView::unpack(env.payload);
  auto it = chains_.find(ch.job);
  if (it == chains_.end()) return;
  ChainCast& cc = it->second;
  if (cc.generation != ch.generation || cc.seq != ch.seq || cc.root != ch.root ||
      cc.failed != ErrorCode::kOk || cc.finished)
    return;
  ChainCast::Frame f;
  if (held) {
    f = {held, std::string_view(static_cast<const char*>(data), size)};
  } else {  // made here (a test's frame): a copy to keep
    auto copy = std::shared_ptr<char[]>(new char[size]);
    std::copy_n(static_cast<const char*>(data), size, copy.get());
    f = {std::shared_ptr<void>(copy), std::string_view(copy.get(), size)};
  }
  cc.self_pulls.erase(ch.index);
  hold(cc, ch.index, std::move(f), out);
}

}  // namespace muster::daemon
