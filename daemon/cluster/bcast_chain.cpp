// Broadcast across nodes along a chain: see cluster/bcast_chain.hpp. The
// requests are the coordinator's (bcast_push, bcast_pull, bcast_leave);
// only where they go differs, so ranks cannot tell. A pull from the next
// node comes in a Forward with relay set (relay.cpp passes it here).
#include <algorithm>

#include "cluster/bcast_relay.hpp"
#include "cluster/node_links.hpp"
#include "log.hpp"

namespace muster::daemon {

using proto::MsgType;

namespace {

std::string name_of(const ChainCast& cc) {
  return "broadcast #" + std::to_string(cc.seq) + " of job '" + cc.job + "' from rank " +
         std::to_string(cc.root);
}

Clock::time_point deadline(int64_t ms) {
  return Clock::now() + std::chrono::milliseconds(ms);
}

}  // namespace

ChainCast& NodeLinks::chain_cast(const Job& job, uint64_t generation, uint64_t seq, uint32_t root,
                                 uint64_t size, uint64_t chunk, std::vector<Outgoing>& out) {
  const ClusterInfo& c = *job.cluster;
  if (generation != job.generation)
    throw Error(ErrorCode::kStaleGeneration,
                "broadcast of generation " + std::to_string(generation) + " refused: job '" +
                    job.id + "' is at generation " + std::to_string(job.generation) + " here");
  if (root >= c.world_size)
    throw Error(ErrorCode::kInvalidArgument, "the root " + std::to_string(root) +
                                                 " is outside the world of " +
                                                 std::to_string(c.world_size) + " rank(s)");
  ChainCast& cc = chains_[job.id];
  if (cc.job.empty() || cc.generation != job.generation || cc.seq < seq) {
    // Every rank passed the done barrier of the one before: what is left
    // of it was abandoned.
    if (!cc.job.empty())
      chain_fail_cast(cc, ErrorCode::kConflict, name_of(cc) + " was abandoned", false, out);
    cc = ChainCast{};
    cc.job = job.id, cc.generation = job.generation, cc.seq = seq, cc.root = root;
    cc.size = size, cc.chunk = chunk, cc.chunks = (size + chunk - 1) / chunk;
    cc.window = bcast_window(chunk);
    cc.source = root >= c.rank_offset && root < c.rank_offset + job.local_world_size;
    const uint32_t next_first =
        c.node_rank + 1 < c.num_nodes ? c.rank_offset + job.local_world_size : 0;
    cc.has_down =
        c.num_nodes > 1 && !(root >= next_first && root < next_first + c.chain_next_nproc);
  } else if (seq < cc.seq) {
    throw Error(ErrorCode::kConflict, "broadcast #" + std::to_string(seq) + " of job '" + job.id +
                                          "' is over: the job's collectives are at #" +
                                          std::to_string(cc.seq));
  }
  if (cc.root != root || cc.size != size || cc.chunk != chunk)
    throw Error(ErrorCode::kInvalidArgument,
                name_of(cc) + " has " + std::to_string(cc.size) + " bytes in chunks of " +
                    std::to_string(cc.chunk) + ", not from rank " + std::to_string(root) + " " +
                    std::to_string(size) + " bytes in chunks of " + std::to_string(chunk));
  if (cc.failed != ErrorCode::kOk) throw Error(cc.failed, cc.why);
  if (cc.finished) throw Error(ErrorCode::kConflict, name_of(cc) + " is over");
  return cc;
}

// The room the next node leaves: chunks below this may be held.
static uint64_t room(const ChainCast& cc) {
  return !cc.has_down || cc.down_left ? UINT64_MAX : cc.down_have + cc.window;
}

void NodeLinks::chain_serve(ChainCast& cc, const ReplyTo& to, const ChainCast::Frame& f,
                            std::vector<Outgoing>& out) {
  Outgoing o{to, {}};
  o.held = f.held;
  o.body = f.body;
  out.push_back(std::move(o));
  cc.passed += f.body.size();
}

void NodeLinks::chain_hold(ChainCast& cc, uint64_t index, ChainCast::Frame f,
                           std::vector<Outgoing>& out) {
  if (!cc.has_down || cc.down_left || index < cc.down_have || cc.held.count(index)) return;
  const ChainCast::Frame& held = cc.held.emplace(index, std::move(f)).first->second;
  std::erase_if(cc.down_pulls, [&](const ChainCast::Parked& p) {
    if (p.index != index) return false;
    chain_serve(cc, p.to, held, out);
    return true;
  });
}

void NodeLinks::chain_advance(ChainCast& cc, std::vector<Outgoing>& out) {
  cc.held.erase(cc.held.begin(), cc.held.lower_bound(cc.down_have));
  std::vector<ChainCast::Waiting> again;  // pulls that go upstream now
  std::erase_if(cc.waiting, [&](ChainCast::Waiting& w) {
    if (w.index >= room(cc)) return false;
    if (w.frame.empty())
      out.push_back({w.to, proto::encode(w.to.request_id, proto::Ok{}), {}});
    else
      again.push_back(std::move(w));
    return true;
  });
  if (cc.local_done && (!cc.has_down || cc.down_left) && !cc.finished) {
    cc.finished = true;
    cc.held.clear();
    for (const auto& p : cc.down_pulls)
      fail(p.to, ErrorCode::kConflict, name_of(cc) + " is over: the next node left it", out);
    cc.down_pulls.clear();
    log::info(log::job(cc.job), name_of(cc) + ", " + std::to_string(cc.size) + " bytes: " +
                                    std::to_string(cc.passed) + " bytes passed to the next node");
  }
  for (auto& w : again) try {
      maybe_forward(w.to, proto::decode_envelope(w.frame.data(), w.frame.size()), out);
    } catch (const Error& e) {
      fail(w.to, e.code(), e.what(), out);
    }
}

void NodeLinks::chain_fail_cast(ChainCast& cc, ErrorCode code, const std::string& why, bool tell_up,
                                std::vector<Outgoing>& out) {
  if (cc.finished || cc.failed != ErrorCode::kOk) return;
  for (const auto& p : cc.down_pulls) fail(p.to, code, why, out);
  for (const auto& w : cc.waiting) fail(w.to, code, why, out);
  cc.down_pulls.clear();
  cc.waiting.clear();
  cc.held.clear();
  cc.failed = code;
  cc.why = why;
  log::info(log::job(cc.job), name_of(cc) + " failed here: " + why);
  const Job* job = jobs_.find(cc.job);
  if (!tell_up || cc.source || cc.local_done || !job || !job->cluster) return;
  // The nodes before stop holding chunks for this one, and fail too.
  proto::BcastLeave m{cc.job,  cc.generation, cc.seq, cc.root, job->cluster->node_rank,
                      cc.size, cc.chunk,      why};
  proto::Forward f{cc.job, cc.generation, proto::encode(0, m), true};
  send_link(job->cluster->chain_prev, {LinkPending::Kind::kNotice, {}, cc.job}, f, out);
}

bool NodeLinks::chain_local(const ReplyTo& to, Job& job, const proto::Envelope& env,
                            std::vector<Outgoing>& out) {
  const ClusterInfo& c = *job.cluster;
  const auto type = static_cast<MsgType>(env.type);
  if (type == MsgType::kBcastPull) {
    auto m = proto::BcastPull::unpack(env.payload);
    if (m.node_rank != c.node_rank)
      throw Error(ErrorCode::kInvalidArgument, "bcast_pull for node " +
                                                   std::to_string(m.node_rank) + " on node " +
                                                   std::to_string(c.node_rank));
    ChainCast& cc = chain_cast(job, m.generation, m.seq, m.root, m.size, m.chunk, out);
    if (cc.source)
      throw Error(ErrorCode::kInvalidArgument, name_of(cc) + ": the root's node pulls nothing");
    if (m.index < room(cc)) return false;  // goes upstream now (forward_bcast)
    cc.waiting.push_back({to, m.index, deadline(m.timeout_ms),
                          proto::encode_object(to.request_id, env.type, env.payload)});
    return true;
  }
  if (type == MsgType::kBcastPush) {
    auto m = proto::BcastPushView::unpack(env.payload);
    ChainCast& cc = chain_cast(job, m.generation, m.seq, m.root, m.size, m.chunk, out);
    if (!cc.source)
      throw Error(ErrorCode::kInvalidArgument, name_of(cc) + ": the root is not on this node");
    if (cc.local_done)
      throw Error(ErrorCode::kConflict, name_of(cc) + ": a chunk pushed after the root's last one");
    if (room(cc) != UINT64_MAX && m.index >= cc.down_have + 2 * cc.window)
      throw Error(ErrorCode::kTooLarge,
                  name_of(cc) + ": chunk " + std::to_string(m.index) + " pushed before chunk " +
                      std::to_string(m.index - cc.window) +
                      " had room: wait for a push's answer before running further ahead");
    if (room(cc) != UINT64_MAX && m.index >= cc.down_have && !cc.held.count(m.index)) {
      std::shared_ptr<PoolFile> from;
      if (m.pool.set()) from = open_pool(to, m.pool, m.pool.offset + m.size, false);
      BcastRelay::Chunk ch = shared_chunk(m, 0, from.get());
      const std::string_view body(ch.frame.get(), ch.size);
      chain_hold(cc, m.index, {std::shared_ptr<void>(std::move(ch.frame)), body}, out);
    }
    cc.pushed = std::max(cc.pushed, m.index + 1);
    if (m.index >= room(cc))
      cc.waiting.push_back({to, m.index, deadline(m.timeout_ms), {}});
    else
      out.push_back({to, proto::encode(to.request_id, proto::Ok{}), {}});
    return true;
  }
  if (type != MsgType::kBcastLeave) return false;
  auto m = proto::BcastLeave::unpack(env.payload);
  if (m.node_rank != c.node_rank)
    throw Error(ErrorCode::kInvalidArgument, "bcast_leave for node " + std::to_string(m.node_rank) +
                                                 " on node " + std::to_string(c.node_rank));
  ChainCast& cc = chain_cast(job, m.generation, m.seq, m.root, m.size, m.chunk, out);
  if (cc.source && m.why.empty() && cc.pushed != cc.chunks)
    throw Error(ErrorCode::kInvalidArgument, name_of(cc) + ": the root is done after " +
                                                 std::to_string(cc.pushed) + " of " +
                                                 std::to_string(cc.chunks) + " chunk(s)");
  if (!m.why.empty())
    chain_fail_cast(cc, ErrorCode::kPeerExited,
                    name_of(cc) +
                        (cc.source ? " stopped on the root: "
                                   : " stopped on node " + std::to_string(c.node_rank) + ": ") +
                        m.why,
                    false, out);
  cc.local_done = true;
  if (cc.source) {
    out.push_back({to, proto::encode(to.request_id, proto::Ok{}), {}});
  } else {  // the nodes before hold nothing more for this one; its answer goes to the rank
    LinkPending p{LinkPending::Kind::kForward, to, job.id};
    p.bcast = true;
    send_link(c.chain_prev, std::move(p),
              proto::Forward{job.id, job.generation, proto::encode(0, m), true}, out);
  }
  if (cc.failed == ErrorCode::kOk) chain_advance(cc, out);
  return true;
}

void NodeLinks::chain_from_down(const ReplyTo& to, Job& job, const proto::Envelope& env,
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
      cc = &chain_cast(job, m.generation, m.seq, m.root, m.size, m.chunk, out);
    } catch (const Error&) {
      if (m.why.empty()) throw;  // a node that gave up on what failed here: nothing to undo
    }
    if (cc) {
      cc->down_left = true;
      if (!m.why.empty())
        chain_fail_cast(*cc, ErrorCode::kPeerExited,
                        name_of(*cc) + ": node " + std::to_string(next) + " gave up: " + m.why,
                        true, out);
      else
        chain_advance(*cc, out);
    }
    out.push_back({to, proto::encode(to.request_id, proto::Ok{}), {}});
    return;
  }
  auto m = proto::BcastPull::unpack(env.payload);
  if (m.node_rank != next) throw not_next(m.node_rank);
  if (!m.shared || m.pool.set())
    throw Error(ErrorCode::kInvalidArgument,
                "a node daemon pulls shared chunks, without a rank's pool");
  ChainCast& cc = chain_cast(job, m.generation, m.seq, m.root, m.size, m.chunk, out);
  if (!cc.has_down)
    throw Error(ErrorCode::kInvalidArgument,
                name_of(cc) + ": node " + std::to_string(next) + " holds the root");
  if (cc.down_left)
    throw Error(ErrorCode::kConflict,
                name_of(cc) + ": node " + std::to_string(next) + " has left it");
  if (m.index >= m.have + 2 * cc.window)
    throw Error(ErrorCode::kTooLarge, name_of(cc) + ": chunk " + std::to_string(m.index) +
                                          " asked for while holding only " +
                                          std::to_string(m.have) + " chunk(s)");
  cc.down_have = std::max(cc.down_have, m.have);
  chain_advance(cc, out);
  if (auto h = cc.held.find(m.index); h != cc.held.end())
    chain_serve(cc, to, h->second, out);
  else if (m.index < cc.down_have)
    throw Error(ErrorCode::kConflict, name_of(cc) + ": chunk " + std::to_string(m.index) +
                                          " was dropped: node " + std::to_string(next) +
                                          " said it holds it");
  else
    cc.down_pulls.push_back({to, m.index, deadline(m.timeout_ms)});
}

void NodeLinks::chain_got(const proto::Envelope& env, void* data, size_t size,
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
  chain_hold(cc, ch.index, std::move(f), out);
}

void NodeLinks::chain_fail(const std::string& job, ErrorCode code, const std::string& why,
                           bool tell_up, std::vector<Outgoing>& out) {
  auto it = chains_.find(job);
  if (it == chains_.end()) return;
  chain_fail_cast(it->second, code, why, tell_up, out);
  // Pulls in flight to the node before: it may be the one that died.
  const Job* j = jobs_.find(job);
  auto lit = j && j->cluster ? links_.find(j->cluster->chain_prev) : links_.end();
  if (lit == links_.end()) return;
  std::erase_if(lit->second.pending, [&](const auto& kv) {
    const LinkPending& p = kv.second;
    if (!p.bcast || p.job != job || p.kind != LinkPending::Kind::kForward) return false;
    fail(p.to, code, why, out);
    return true;
  });
}

void NodeLinks::chain_tick(Clock::time_point now, std::vector<Outgoing>& out) {
  for (auto it = chains_.begin(); it != chains_.end();) {
    ChainCast& cc = it->second;
    const Job* job = jobs_.find(it->first);
    if (!job || job->generation != cc.generation) {
      chain_fail_cast(cc, ErrorCode::kPeerExited, name_of(cc) + ": its generation is over", false,
                      out);
      it = chains_.erase(it);
      continue;
    }
    std::erase_if(cc.down_pulls, [&](const ChainCast::Parked& p) {
      if (p.deadline > now) return false;
      fail(p.to, ErrorCode::kTimeout,
           name_of(cc) + ": chunk " + std::to_string(p.index) + " did not arrive in time", out);
      return true;
    });
    std::erase_if(cc.waiting, [&](const ChainCast::Waiting& w) {
      if (w.deadline > now) return false;
      fail(w.to, ErrorCode::kTimeout,
           name_of(cc) + ": no room for chunk " + std::to_string(w.index) +
               " in time: the next node holds only " + std::to_string(cc.down_have) + " of " +
               std::to_string(cc.chunks) + " chunk(s)",
           out);
      return true;
    });
    ++it;
  }
}

}  // namespace muster::daemon
