// ChainBroadcasts (chain_broadcasts.hpp): a broadcast across nodes along
// the chain, as cluster/broadcast/bcast_chain.hpp draws it. The requests are the
// coordinator's (bcast_push, bcast_pull, bcast_leave); only where they go
// differs, so ranks cannot tell. A pull from the next node comes in a
// Forward with relay set (relays.cpp passes it here).
#include <algorithm>

#include "cluster/broadcast/bcast_fail.hpp"
#include "cluster/broadcast/bcast_relay.hpp"
#include "cluster/broadcast/chain_broadcasts.hpp"
#include "log.hpp"

namespace muster::daemon {

using proto::MsgType;

ChainRole chain_role(const Job& job, uint32_t root) {
  const ClusterInfo& c = *job.cluster;
  if (root >= c.world_size)
    throw Error(ErrorCode::kInvalidArgument, "the root " + std::to_string(root) +
                                                 " is outside the world of " +
                                                 std::to_string(c.world_size) + " rank(s)");
  const uint32_t next_first =
      c.node_rank + 1 < c.num_nodes ? c.rank_offset + job.local_world_size : 0;
  return {root >= c.rank_offset && root<c.rank_offset + job.local_world_size, c.num_nodes> 1 &&
          !(root >= next_first && root < next_first + c.chain_next_nproc)};
}

ChainCast& ChainBroadcasts::cast(const Job& job, uint64_t generation, uint64_t seq, uint32_t root,
                                 uint64_t size, uint64_t chunk, bool local,
                                 std::vector<Outgoing>& out) {
  if (generation != job.generation)
    throw Error(ErrorCode::kStaleGeneration,
                "broadcast of generation " + std::to_string(generation) + " refused: job '" +
                    job.id + "' is at generation " + std::to_string(job.generation) + " here");
  const ChainRole role = chain_role(job, root);
  ChainCast& cc = chains_[job.id];
  const bool under_way = !cc.job.empty() && cc.generation == job.generation && !cc.finished &&
                         cc.failed == ErrorCode::kOk;
  // What only the next node said (a peer: maybe not the next node at all)
  // gives way to this node's own rank.
  const bool disagrees = cc.root != root || cc.size != size || cc.chunk != chunk;
  const bool overrule = local && !cc.job.empty() && !cc.local_seen && (cc.seq != seq || disagrees);
  if (cc.job.empty() || cc.generation != job.generation || cc.seq < seq || overrule) {
    // The next node starts a broadcast only after this node's part of the
    // one before ended (every rank passed its done barrier first); this
    // node's rank abandons what is left of it.
    if (under_way && !local)
      throw Error(ErrorCode::kConflict, chain_name(cc) + " is still under way here");
    if (!cc.job.empty())
      fail_cast(cc, overrule ? ErrorCode::kInvalidArgument : ErrorCode::kConflict,
                chain_name(cc) + (overrule ? " has another size here" : " was abandoned"), false,
                out);
    cc = ChainCast{};
    cc.job = job.id, cc.generation = job.generation, cc.seq = seq, cc.root = root;
    cc.size = size, cc.chunk = chunk, cc.chunks = (size + chunk - 1) / chunk;
    cc.window = bcast_window(chunk);
    cc.source = role.source;
    cc.has_down = role.has_down;
  } else if (seq < cc.seq) {
    throw Error(ErrorCode::kConflict, "broadcast #" + std::to_string(seq) + " of job '" + job.id +
                                          "' is over: the job's collectives are at #" +
                                          std::to_string(cc.seq));
  }
  if (cc.root != root || cc.size != size || cc.chunk != chunk)
    throw Error(ErrorCode::kInvalidArgument,
                chain_name(cc) + " has " + std::to_string(cc.size) + " bytes in chunks of " +
                    std::to_string(cc.chunk) + ", not from rank " + std::to_string(root) + " " +
                    std::to_string(size) + " bytes in chunks of " + std::to_string(chunk));
  // A rank of this node ended in this generation, maybe before its daemon
  // heard of this broadcast: it cannot complete.
  if (auto e = exits_.find(job.id); e != exits_.end() && e->second.first == generation)
    fail_cast(cc, ErrorCode::kPeerExited, chain_name(cc) + " cannot complete: " + e->second.second,
              true, out);
  if (cc.failed != ErrorCode::kOk) throw Error(cc.failed, cc.why);
  if (cc.finished) throw Error(ErrorCode::kConflict, chain_name(cc) + " is over");
  cc.local_seen |= local;
  return cc;
}

// Whether a request of this node's for chunk `index` waits for room: one
// a chunk, so that what waits is bounded by the window.
static bool waiting_for(const ChainCast& cc, uint64_t index) {
  return std::any_of(cc.waiting.begin(), cc.waiting.end(),
                     [&](const ChainCast::Waiting& w) { return w.index == index; });
}

// How far this node's relay may pull ahead of the next node: two windows,
// as far as the next node may ask ahead of what it holds (its last pulls
// say it holds up to 4 fewer chunks than it asked for: a window of 2 must
// not stop the last chunk from coming here).
static uint64_t pull_room(const ChainCast& cc) {
  return !cc.has_down || cc.down_left ? UINT64_MAX : cc.down_have + 2 * cc.window;
}

// The room the next node leaves: chunks below this may be held.
static uint64_t room(const ChainCast& cc) {
  return !cc.has_down || cc.down_left ? UINT64_MAX : cc.down_have + cc.window;
}

void ChainBroadcasts::advance(ChainCast& cc, std::vector<Outgoing>& out) {
  cc.held.erase(cc.held.begin(), cc.held.lower_bound(cc.down_have));
  std::vector<ChainCast::Waiting> again;  // pulls that go upstream now
  std::erase_if(cc.waiting, [&](ChainCast::Waiting& w) {
    if (w.index >= (w.frame.empty() ? room(cc) : pull_room(cc))) return false;
    if (w.frame.empty())
      out.push_back({w.to, proto::encode(w.to.request_id, proto::Ok{}), {}});
    else
      again.push_back(std::move(w));
    return true;
  });
  if (cc.local_done && (!cc.has_down || cc.down_left) && !cc.finished) {
    cc.finished = true;
    cc.held.clear();
    cc.self_pulls.clear();  // a late refusal of one is moot now
    for (const auto& p : cc.down_pulls)
      refuse(p.to, ErrorCode::kConflict, chain_name(cc) + " is over: the next node left it", out);
    cc.down_pulls.clear();
    log::info(log::job(cc.job), chain_name(cc) + ", " + std::to_string(cc.size) + " bytes: " +
                                    std::to_string(cc.passed) + " bytes passed to the next node");
    if (cc.gave_up) tell_node_before(cc, "", out);
  }
  for (auto& w : again) try {
      Job* job = jobs_.find(cc.job);
      if (!job || !job->cluster) throw Error(ErrorCode::kPeerExited, chain_name(cc) + ": ended");
      check_routable(*job);
      links_.send_on(Route::kChain, w.to, *job,
                     proto::decode_envelope(w.frame.data(), w.frame.size()), out);
    } catch (const Error& e) {
      refuse(w.to, e.code(), e.what(), out);
    }
}

void ChainBroadcasts::fail_cast(ChainCast& cc, ErrorCode code, const std::string& why, bool tell_up,
                                std::vector<Outgoing>& out) {
  if (!fail_broadcast(cc, code, why, out, cc.down_pulls, cc.waiting)) return;
  log::info(log::job(cc.job), chain_name(cc) + " failed here: " + why);
  // The nodes before stop holding chunks for this one, and fail too.
  if (tell_up && (!cc.local_done || cc.gave_up)) tell_node_before(cc, why, out);
}

void ChainBroadcasts::tell_node_before(const ChainCast& cc, const std::string& why,
                                       std::vector<Outgoing>& out) {
  const Job* job = jobs_.find(cc.job);
  if (cc.source || !job || !job->cluster) return;
  proto::BcastLeave m{cc.job,  cc.generation, cc.seq, cc.root, job->cluster->node_rank,
                      cc.size, cc.chunk,      why};
  proto::Forward f{cc.job, cc.generation, proto::encode(0, m), true};
  links_.send_up(job->cluster->chain_prev, {LinkPending::Kind::kNotice, {}, cc.job}, f, out);
}

bool ChainBroadcasts::local(const ReplyTo& to, Job& job, const proto::Envelope& env,
                            std::vector<Outgoing>& out) {
  switch (static_cast<MsgType>(env.type)) {
    case MsgType::kBcastPull:
      return pull(to, job, env, out);
    case MsgType::kBcastPush:
      return push(to, job, env, out), true;
    case MsgType::kBcastLeave:
      return leave(to, job, env, out), true;
    default:
      return false;
  }
}

namespace {

// A chain request names the node it is for: this one.
void check_node(const char* what, uint32_t node_rank, const ClusterInfo& c) {
  if (node_rank != c.node_rank)
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + " for node " +
                                                 std::to_string(node_rank) + " on node " +
                                                 std::to_string(c.node_rank));
}

}  // namespace

bool ChainBroadcasts::pull(const ReplyTo& to, Job& job, const proto::Envelope& env,
                           std::vector<Outgoing>& out) {
  const ClusterInfo& c = *job.cluster;
  auto m = proto::BcastPull::unpack(env.payload);
  check_node("bcast_pull", m.node_rank, c);
  if (chain_role(job, m.root).source)
    throw Error(ErrorCode::kInvalidArgument, "bcast_pull: rank " + std::to_string(m.root) +
                                                 " is on this node, which pulls nothing");
  ChainCast& cc = cast(job, m.generation, m.seq, m.root, m.size, m.chunk, true, out);
  if (m.index >= m.have + 2 * cc.window)
    throw Error(ErrorCode::kTooLarge, chain_name(cc) + ": chunk " + std::to_string(m.index) +
                                          " asked for while holding only " +
                                          std::to_string(m.have) + " chunk(s)");
  if (m.index < pull_room(cc)) return false;  // goes upstream now (forward_bcast)
  if (waiting_for(cc, m.index))
    throw Error(ErrorCode::kConflict,
                chain_name(cc) + ": chunk " + std::to_string(m.index) + " is being pulled already");
  cc.waiting.push_back({to, m.index, chain_deadline(m.timeout_ms),
                        proto::encode_object(to.request_id, env.type, env.payload)});
  return true;
}

void ChainBroadcasts::push(const ReplyTo& to, Job& job, const proto::Envelope& env,
                           std::vector<Outgoing>& out) {
  auto m = proto::BcastPushView::unpack(env.payload);
  if (!chain_role(job, m.root).source)
    throw Error(ErrorCode::kInvalidArgument,
                "bcast_push: rank " + std::to_string(m.root) + " is not on this node");
  ChainCast& cc = cast(job, m.generation, m.seq, m.root, m.size, m.chunk, true, out);
  if (cc.local_done)
    throw Error(ErrorCode::kConflict,
                chain_name(cc) + ": a chunk pushed after the root's last one");
  if (room(cc) != UINT64_MAX && m.index >= cc.down_have + 2 * cc.window)
    throw Error(ErrorCode::kTooLarge,
                chain_name(cc) + ": chunk " + std::to_string(m.index) + " pushed before chunk " +
                    std::to_string(m.index - cc.window) +
                    " had room: wait for a push's answer before running further ahead");
  if (room(cc) != UINT64_MAX && m.index >= cc.down_have && !cc.held.count(m.index)) {
    std::shared_ptr<PoolFile> from;
    if (m.pool.set()) from = links_.open_pool(to, m.pool, m.pool.offset + m.size, false);
    BcastRelay::Chunk ch = shared_chunk(m, 0, from.get());
    const std::string_view body(ch.frame.get(), ch.size);
    hold(cc, m.index, {std::shared_ptr<void>(std::move(ch.frame)), body}, out);
  }
  cc.pushed = std::max(cc.pushed, m.index + 1);
  if (m.index >= room(cc) && waiting_for(cc, m.index))
    throw Error(ErrorCode::kConflict,
                chain_name(cc) + ": chunk " + std::to_string(m.index) + " is being pushed already");
  if (m.index >= room(cc))
    cc.waiting.push_back({to, m.index, chain_deadline(m.timeout_ms), {}});
  else
    out.push_back({to, proto::encode(to.request_id, proto::Ok{}), {}});
}

void ChainBroadcasts::leave(const ReplyTo& to, Job& job, const proto::Envelope& env,
                            std::vector<Outgoing>& out) {
  const ClusterInfo& c = *job.cluster;
  auto m = proto::BcastLeave::unpack(env.payload);
  check_node("bcast_leave", m.node_rank, c);
  ChainCast& cc = cast(job, m.generation, m.seq, m.root, m.size, m.chunk, true, out);
  if (cc.source && m.why.empty() && cc.pushed != cc.chunks)
    throw Error(ErrorCode::kInvalidArgument, chain_name(cc) + ": the root is done after " +
                                                 std::to_string(cc.pushed) + " of " +
                                                 std::to_string(cc.chunks) + " chunk(s)");
  if (!m.why.empty() && cc.source)
    fail_cast(cc, ErrorCode::kPeerExited, chain_name(cc) + " stopped on the root: " + m.why, false,
              out);
  cc.local_done = true;
  if (cc.source || !m.why.empty()) {
    // A relay that gave up fails alone (as through the coordinator): this
    // daemon pulls what the next node still asks for itself, and tells the
    // node before once the next node is done.
    if (!m.why.empty() && !cc.source)
      log::info(log::job(job.id), chain_name(cc) + ": this node's relay gave up (" + m.why +
                                      "); its daemon goes on for the next node");
    cc.gave_up = !cc.source;
    // Its pulls that wait for room are moot (the daemon pulls for the next node).
    for (const auto& w : cc.waiting)
      if (!w.frame.empty()) refuse(w.to, ErrorCode::kConflict, chain_name(cc) + ": left", out);
    std::erase_if(cc.waiting, [](const ChainCast::Waiting& w) { return !w.frame.empty(); });
    out.push_back({to, proto::encode(to.request_id, proto::Ok{}), {}});
  } else {  // the nodes before hold nothing more for this one; its answer goes to the rank
    LinkPending p{LinkPending::Kind::kForward, to, job.id};
    p.bcast = true;
    links_.send_up(c.chain_prev, std::move(p),
                   proto::Forward{job.id, job.generation, proto::encode(0, m), true}, out);
  }
  if (cc.failed == ErrorCode::kOk) {
    for (const auto& p : cc.down_pulls)
      if (cc.gave_up) self_pull(cc, p.index, out);
    advance(cc, out);
  }
}

void ChainBroadcasts::refuse(const ReplyTo& to, ErrorCode code, const std::string& msg,
                             std::vector<Outgoing>& out) {
  out.push_back(
      {to, proto::encode_error(to.request_id, code, msg), {}, static_cast<uint16_t>(code)});
}

void ChainBroadcasts::rank_ended(const Job& job, const std::string& ended,
                                 std::vector<Outgoing>& out) {
  exits_[job.id] = {job.generation, ended};
  fail(job.id, ErrorCode::kPeerExited, ended, true, out);
}

void ChainBroadcasts::fail(const std::string& job, ErrorCode code, const std::string& why,
                           bool tell_up, std::vector<Outgoing>& out) {
  auto it = chains_.find(job);
  if (it == chains_.end()) return;
  fail_cast(it->second, code, why, tell_up, out);
  // Pulls in flight to the node before: it may be the one that died.
  const Job* j = jobs_.find(job);
  if (j && j->cluster) links_.fail_in_flight(j->cluster->chain_prev, job, code, why, out);
}

void ChainBroadcasts::tick(Clock::time_point now, std::vector<Outgoing>& out) {
  for (auto it = chains_.begin(); it != chains_.end();) {
    ChainCast& cc = it->second;
    const Job* job = jobs_.find(it->first);
    if (!job || job->generation != cc.generation) {
      fail_cast(cc, ErrorCode::kPeerExited, chain_name(cc) + ": its generation is over", false,
                out);
      it = chains_.erase(it);
      continue;
    }
    std::erase_if(cc.down_pulls, [&](const ChainCast::Parked& p) {
      if (p.deadline > now) return false;
      refuse(p.to, ErrorCode::kTimeout,
             chain_name(cc) + ": chunk " + std::to_string(p.index) + " did not arrive in time",
             out);
      return true;
    });
    std::erase_if(cc.waiting, [&](const ChainCast::Waiting& w) {
      if (w.deadline > now) return false;
      refuse(w.to, ErrorCode::kTimeout,
             chain_name(cc) + ": no room for chunk " + std::to_string(w.index) +
                 " in time: the next node holds only " + std::to_string(cc.down_have) + " of " +
                 std::to_string(cc.chunks) + " chunk(s)",
             out);
      return true;
    });
    ++it;
  }
}

}  // namespace muster::daemon
