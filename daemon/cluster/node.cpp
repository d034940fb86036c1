// The node side of a multi-node job: joining a world through the job's
// coordinator, relaying store and barrier requests to it, heartbeats, and
// noticing when the coordinator goes silent.
#include <algorithm>
#include <set>

#include "cluster/node_links.hpp"
#include "liveness/pidwatch.hpp"
#include "log.hpp"
#include "protocol/message_table.hpp"

namespace muster::daemon {

using proto::MsgType;

namespace {

std::string seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", ms.count() / 1000.0);
  return buf;
}

}  // namespace

// The launcher outlives the job between generations (a restart, an elastic
// re-form) and a new launch has another one; its start time tells a reused
// pid.
std::string NodeLinks::run_of(const Job& job) const {
  if (job.launcher_pid <= 0) return {};
  return node_id_ + "/" + std::to_string(job.launcher_pid) + "/" +
         std::to_string(PidWatch::start_time(job.launcher_pid));
}

void NodeLinks::configure(std::string node_id, std::chrono::milliseconds peer_timeout,
                          std::string unavailable) {
  node_id_ = std::move(node_id);
  peer_timeout_ = peer_timeout;
  peering_unavailable_ = std::move(unavailable);
}

void NodeLinks::send_on(Route where, const ReplyTo& to, Job& job, const proto::Envelope& env,
                        std::vector<Outgoing>& out) {
  const ClusterInfo& c = *job.cluster;
  switch (where) {
    case Route::kRelayBarrier: {
      auto b = proto::Barrier::unpack(env.payload);
      if (b.rank < c.rank_offset || b.rank >= c.rank_offset + job.local_world_size)
        throw Error(ErrorCode::kInvalidArgument,
                    "rank " + std::to_string(b.rank) + " is not one of this node's ranks (" +
                        std::to_string(c.rank_offset) + ".." +
                        std::to_string(c.rank_offset + job.local_world_size - 1) + ") of job '" +
                        job.id + "'");
      return relays_.barrier(to, job, b.name, 1, b.rank - c.rank_offset, b.timeout_ms, out);
    }
    case Route::kKept: {
      const std::string* value = relays_.kept(job, proto::StoreGet::unpack(env.payload).key);
      if (!value) throw Error(ErrorCode::kInternal, "a kept key is gone");
      out.push_back({to, proto::encode(to.request_id, proto::Value{*value}), {}});
      return;
    }
    case Route::kRelayWait:
      return relays_.get(to, job, env, out);
    case Route::kChain:
    case Route::kPool:
    case Route::kForward: {
      // Along the chain, a pull that is not held for room goes to the node
      // before now (forward_bcast), as one with a pool goes upstream.
      if (where == Route::kChain && chain_.local(to, job, env, out)) return;
      LinkPending p{LinkPending::Kind::kForward, to, job.id};
      p.bcast = proto::message_traits(env.type)->area == proto::Area::kBcast;
      if (where != Route::kForward && forward_bcast(to, job, env, p, out)) return;
      proto::Forward f{job.id, job.generation, proto::encode_object(0, env.type, env.payload)};
      send_link(c.coordinator, std::move(p), f, out);
      return;
    }
    case Route::kServeHere:
    case Route::kCoordinatorHere:
      break;
  }
  throw Error(ErrorCode::kInternal, std::string("the node side cannot send a request the way '") +
                                        route_name(where) + "'");
}

void NodeLinks::rendezvous(const ReplyTo& to, const proto::Envelope& env,
                           std::vector<Outgoing>& out) {
  auto m = proto::Rendezvous::unpack(env.payload);
  Job& job = jobs_.get(m.job);
  // A rendezvous sent again after this daemon restarted (its join to the
  // coordinator died with it) joins again; a second one while the first
  // waits is refused.
  if (job.cluster && !job.cluster->formed && joining(m.job))
    throw Error(ErrorCode::kConflict, "job '" + m.job + "' is already in a rendezvous");
  if (job.cluster && job.cluster->formed)
    throw Error(ErrorCode::kConflict, "job '" + m.job + "' already has its world (generation " +
                                          std::to_string(job.generation) +
                                          "); a new generation starts with a new reservation");
  if (!peering_unavailable_.empty())
    throw Error(ErrorCode::kInvalidArgument,
                "this daemon cannot join multi-node jobs: " + peering_unavailable_);
  if (node_id_.empty())
    throw Error(ErrorCode::kInternal, "this daemon has no node id for multi-node jobs");
  check_links(job, m);
  job.cluster = ClusterInfo{};
  job.cluster->coordinator = m.coordinator;
  // Children in the relay tree reach us where we listen; a wildcard bind
  // is advertised under the address muster run gives for this node.
  std::string advertised = peer_endpoint_;
  for (const char* any : {"0.0.0.0:", "*:", "[::]:"})
    if (advertised.rfind(any, 0) == 0)
      advertised = m.master_addr + advertised.substr(std::string(any).size() - 1);
  proto::NodeJoin j{m.job,       node_id_,       job.local_world_size, m.node_rank,   m.min_nodes,
                    m.max_nodes, m.last_call_ms, m.timeout_ms,         m.master_addr, m.master_port,
                    advertised,  job.owner_uid,  node_name_,           run_of(job)};
  j.chain = true;  // it serves broadcasts node to node (cluster/broadcast/chain_broadcasts.cpp)
  // Through a relay (joins.cpp), which batches its children's joins.
  job.cluster->via = m.via == m.coordinator ? "" : m.via;
  log::info(log::peer(m.coordinator, m.job),
            "job=" + m.job + " joins its world through " + m.coordinator +
                (job.cluster->via.empty() ? "" : " via " + job.cluster->via) + " (" +
                std::to_string(m.min_nodes) + ".." + std::to_string(m.max_nodes) + " nodes)");
  if (job.cluster->via.empty())
    return (void)send_link(m.coordinator, {LinkPending::Kind::kRendezvous, to, m.job}, j, out);
  j.relay = true;
  send_link(job.cluster->via, {LinkPending::Kind::kRendezvous, to, m.job, "via"}, j, out);
}

bool NodeLinks::joining(const std::string& job) const {
  for (const auto& [name, l] : links_)
    for (const auto& [id, p] : l.pending)
      if (p.kind == LinkPending::Kind::kRendezvous && p.job == job) return true;
  return false;
}

proto::JobEvent NodeLinks::cluster_state(const std::string& id) const {
  const Job& job = jobs_.get(id);
  // A GPU the job holds failed (core/gpu_health.cpp): its launcher stops the
  // group, as it would for a failed rank.
  if (!job.device_failure.empty()) return {id, job.generation, "device_failed", job.device_failure};
  if (!job.cluster) return {id, job.generation, "running", "a single-node job"};
  proto::JobEvent e{id, job.generation, to_string(job.cluster->phase), job.cluster->message};
  if (auto f = forming_.find(id); f != forming_.end() && !job.cluster->formed) {
    e.forming = f->second.forming;
    if (auto& left = e.forming.closes_in_ms) {
      auto since =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - f->second.at);
      *left = std::max<int64_t>(0, *left - since.count());
    }
  }
  return e;
}

// A coordinator's bcast_chunk (MiB) goes on to the rank that pulled it as
// it came, not copied into a new frame: the coordinator writes its request
// id full-width (0xcf and 8 bytes, after the envelope's array head and
// version), and the rank's id takes its place.
bool NodeLinks::pass_on(const ReplyTo& to, void* data, size_t size, const proto::Envelope& env,
                        std::shared_ptr<void>& held, std::vector<Outgoing>& out) {
  auto* b = static_cast<unsigned char*>(data);
  if (env.type != static_cast<uint16_t>(MsgType::kBcastChunk) || size < 11 || b[0] != 0x94 ||
      b[1] >= 0x80 || b[2] != 0xcf)
    return false;
  for (int k = 0; k < 8; ++k) b[3 + k] = static_cast<unsigned char>(to.request_id >> (56 - 8 * k));
  Outgoing o{to, {}};
  o.body = std::string_view(static_cast<const char*>(data), size);
  o.held = std::move(held);
  out.push_back(std::move(o));
  return true;
}

void NodeLinks::on_link_frame(const std::string& link, void* data, size_t size,
                              std::vector<Outgoing>& out, std::shared_ptr<void> held) {
  auto lit = links_.find(link);
  if (lit == links_.end()) return;
  Link& l = lit->second;
  l.last_heard = Clock::now();
  l.lost = false;
  proto::Envelope env;
  try {
    env = proto::decode_envelope(data, size, true);  // bins point into data: used right here
    if (static_cast<MsgType>(env.type) == MsgType::kReplies) return on_replies(link, env, out);
  } catch (const Error& e) {
    log::warning(log::peer(link), "coordinator " + link + " sent a bad frame: " + e.what());
    return;
  }
  uint64_t id = env.request_id;
  const bool shared = id == 0 && static_cast<MsgType>(env.type) == MsgType::kBcastChunk;
  try {
    if (shared) id = shared_pull(link, env);
  } catch (const Error& e) {
    log::warning(log::peer(link), "coordinator " + link + " sent a bad bcast_chunk: " + e.what());
    return;
  }
  auto pit = l.pending.find(id);
  if (pit == l.pending.end()) return;  // answered already (e.g. after a loss)
  LinkPending p = std::move(pit->second);
  l.pending.erase(pit);
  try {
    if (shared) chain_.got(env, data, size, held, out);  // for the next node too
    switch (p.kind) {
      case LinkPending::Kind::kForward:
        if (p.into) return pool_answer(p, env, out);
        // Never a shared frame: it may be held for the next node as it is.
        if (!shared && held && pass_on(p.to, data, size, env, held, out)) return;
        out.push_back({p.to, proto::encode_object(p.to.request_id, env.type, env.payload), {}});
        return;
      case LinkPending::Kind::kRendezvous:
        return world_arrived(p, env, out);
      case LinkPending::Kind::kHeartbeat:
        l.beat_unanswered.reset();
        return heartbeat_answered(link, p, env, out);
      case LinkPending::Kind::kNotice:
        // A self pull refused: the next node's pulls that wait for it fail.
        if (p.bcast) chain_.self_refused(p, env, out);
        return;
      case LinkPending::Kind::kRelayNotice:
        if (static_cast<MsgType>(env.type) == MsgType::kErrorReply) notices_.direct(p, out);
        return;
      case LinkPending::Kind::kRelayBarrier:
      case LinkPending::Kind::kRelayGet:
        relays_.answer(p, env, out);
        return;
      case LinkPending::Kind::kRelayJoin:
      case LinkPending::Kind::kRelayJoins:
        return join_answered(p, env, out);
      case LinkPending::Kind::kJobWaits:
        job_waits_.push_back({p.to, p.job, std::nullopt});
        if (static_cast<MsgType>(env.type) == MsgType::kJobWaitsReply)
          job_waits_.back().waits = proto::JobWaitsReply::unpack(env.payload).waits;
        return;
    }
  } catch (const Error& e) {
    log::warning(log::peer(link), "coordinator " + link + " sent a bad " +
                                      proto::type_name(env.type) + ": " + e.what());
    if (p.kind == LinkPending::Kind::kForward || p.kind == LinkPending::Kind::kRendezvous)
      fail(p.to, ErrorCode::kBadMessage, std::string("bad answer from coordinator: ") + e.what(),
           out);
  }
}

// The coordinator's answer to a rendezvous: this node's place in the world.
void NodeLinks::world_arrived(const LinkPending& p, const proto::Envelope& env,
                              std::vector<Outgoing>& out) {
  Job* found = jobs_.find(p.job);
  if (static_cast<MsgType>(env.type) == MsgType::kErrorReply) {
    auto e = proto::ErrorReply::unpack(env.payload);
    // A relay that could not pass the join on: the coordinator takes it
    // (its own refusals, passed on by the relay, stand). One that answers
    // after this node went to the coordinator anyway says nothing more.
    const auto code = static_cast<ErrorCode>(e.code);
    if (p.key == "via" && found && found->cluster && found->cluster->via.empty()) return;
    if (p.key == "via" && found && found->cluster &&
        (code == ErrorCode::kUnavailable || code == ErrorCode::kPeerExited))
      return join_direct(p, e.message, out);
  }
  forming_.erase(p.job);
  if (static_cast<MsgType>(env.type) == MsgType::kErrorReply) {
    auto e = proto::ErrorReply::unpack(env.payload);
    if (found && found->cluster) found->cluster.reset();
    fail(p.to, static_cast<ErrorCode>(e.code), "rendezvous: " + e.message, out);
    drop_rendezvous(p.job);  // the same join sent the other way answers nobody now
    relays_.fail(p.job, static_cast<ErrorCode>(e.code), "rendezvous: " + e.message, out);
    relays_.all().erase(p.job);  // no world: nothing below to pass on either
    return;
  }
  auto w = proto::World::unpack(env.payload);
  if (w.job != p.job) {  // not the answer to this join
    log::warning(log::job(p.job), "job=" + p.job + " ignored a World for job '" + w.job + "'");
    return;
  }
  if (!found || !found->cluster) return;  // the launcher is gone
  Job& job = *found;
  ClusterInfo& c = *job.cluster;
  c.formed = true;
  c.node_rank = w.node_rank;
  c.num_nodes = w.num_nodes;
  c.rank_offset = w.rank_offset;
  c.world_size = w.world_size;
  c.parent = w.parent;
  c.chain_prev = w.chain_prev;
  c.chain_next_nproc = w.chain_next_nproc;
  c.beat_direct = false;  // a new tree: its parent is tried first
  c.via.clear();
  // The same join sent two ways (joins.cpp: through a relay, then to the
  // coordinator): the first World counts.
  drop_rendezvous(p.job);
  c.subtree_ranks = w.subtree_ranks ? w.subtree_ranks : job.local_world_size;
  c.phase = ClusterPhase::kRunning;
  c.message.clear();
  job.generation = w.generation;
  log::info(log::job(job.id), "job=" + job.id + " generation " + std::to_string(w.generation) +
                                  ": node rank " + std::to_string(w.node_rank) + " of " +
                                  std::to_string(w.num_nodes) + ", ranks " +
                                  std::to_string(w.rank_offset) + ".." +
                                  std::to_string(w.rank_offset + job.local_world_size - 1) +
                                  " of " + std::to_string(w.world_size));
  out.push_back({p.to, proto::encode(p.to.request_id, w)});
  relays_.early(job.id, out);
}

void NodeLinks::link_lost(const std::string& link, Link& l, std::vector<Outgoing>& out) {
  std::string why =
      "lost contact with the coordinator " + link + ": no answer for " +
      seconds(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - l.last_heard));
  log::warning(log::peer(link), why);
  l.lost = true;
  std::set<std::string> answered;  // jobs whose launcher heard of it already
  for (auto& [id, p] : l.pending)
    if (p.kind == LinkPending::Kind::kForward || p.kind == LinkPending::Kind::kRendezvous ||
        p.kind == LinkPending::Kind::kRelayJoin) {
      fail(p.to, ErrorCode::kPeerExited, why, out);
      if (p.kind == LinkPending::Kind::kRendezvous) answered.insert(p.job);
    } else if (p.kind == LinkPending::Kind::kJobWaits)
      job_waits_.push_back({p.to, p.job, std::nullopt});
  l.pending.clear();
  // Joins sent through a relay to this coordinator wait for nothing now.
  for (auto& [job_id, job] : jobs_) {
    if (!job.cluster || job.cluster->coordinator != link || job.cluster->formed) continue;
    const std::string& id = job_id;  // a lambda may not capture a structured binding (clang)
    for (auto& [name, other] : links_)
      std::erase_if(other.pending, [&](const auto& kv) {
        bool via = kv.second.kind == LinkPending::Kind::kRendezvous && kv.second.job == id;
        if (via && answered.insert(id).second) fail(kv.second.to, ErrorCode::kPeerExited, why, out);
        return via;
      });
  }
  for (auto& [id, job] : jobs_)
    if (job.cluster && job.cluster->coordinator == link && job.cluster->formed) {
      job.cluster->phase = ClusterPhase::kBroken;
      job.cluster->message = why;
      relays_.fail(id, ErrorCode::kPeerExited, why, out);
    }
}

void NodeLinks::resend(const std::string& link, std::vector<Outgoing>& out) {
  auto lit = links_.find(link);
  if (lit == links_.end() || lit->second.lost) return;
  auto& pending = lit->second.pending;
  size_t again = 0;
  std::set<std::string> self_pulled;  // jobs whose self pulls (bcast_chain) were lost
  for (auto it = pending.begin(); it != pending.end();) {
    if (it->second.here) {  // never went over the connection
      ++it;
      continue;
    }
    if (it->second.bcast && it->second.kind == LinkPending::Kind::kNotice) {
      // A self pull (bcast_chain): its broadcast fails, both ways, below.
      self_pulled.insert(it->second.job);
      it = pending.erase(it);
      continue;
    }
    if (it->second.bcast) {
      fail(it->second.to, ErrorCode::kRestarted,
           "the link to the job's coordinator " + link +
               " connected again while a broadcast chunk was on the way; the ranks start the "
               "broadcast again",
           out);
      it = pending.erase(it);
      continue;
    }
    if (!it->second.frame.empty()) {
      out.push_back({{}, it->second.frame, link});
      ++again;
    }
    ++it;
  }
  for (const auto& job : self_pulled)
    chain_.fail(job, ErrorCode::kRestarted,
                "the link to " + link + " connected again while a broadcast chunk was on the way",
                true, out);
  if (again)
    log::notice(log::peer(link), "sent " + std::to_string(again) +
                                     " request(s) in flight again to coordinator " + link);
}

void NodeLinks::slot_ended(Job& job, uint32_t local_rank, const char* why,
                           std::vector<Outgoing>& out) {
  if (!job.cluster || !job.cluster->formed) return;
  // No barrier of this node's subtree can complete now.
  if (auto rit = relays_.all().find(job.id); rit != relays_.all().end()) {
    std::string why_all = "barrier of job '" + job.id + "' cannot complete: rank " +
                          std::to_string(job.cluster->rank_offset + local_rank) + " " + why;
    for (auto& [name, b] : rit->second.barriers)
      for (const auto& w : b.waiters) fail(w, ErrorCode::kPeerExited, why_all, out);
    rit->second.barriers.clear();
  }
  const std::string ended =
      "rank " + std::to_string(job.cluster->rank_offset + local_rank) + " " + why;
  chain_.rank_ended(job, ended, out);
  // Told upstream with the ranks that end with it (notices.cpp).
  notices_.queue_exited(job, job.cluster->rank_offset + local_rank, why, out);
}

void NodeLinks::job_removed(Job& job, std::vector<Outgoing>& out) {
  forming_.erase(job.id);
  if (!job.cluster) return;
  chain_.fail(job.id, ErrorCode::kPeerExited, "job '" + job.id + "' ended on this node", true, out);
  relays_.fail(job.id, ErrorCode::kPeerExited, "job '" + job.id + "' ended on this node", out);
  chain_.forget(job.id);
  drop_joins(job.id, out);
  // The leaves below not passed on yet go with ours.
  std::vector<std::string> also;
  if (auto rit = relays_.all().find(job.id); rit != relays_.all().end()) {
    if (rit->second.below_generation == job.generation) {
      if (job.cluster->formed) notices_.send_exited(job, rit->second, out);  // before the leave
      also = std::move(rit->second.left);
    }
    relays_.all().erase(rit);
  }
  // A rendezvous still waiting for its world (at the coordinator or at a
  // relay) has nobody left to answer.
  drop_rendezvous(job.id);
  const ClusterInfo& c = *job.cluster;
  proto::NodeLeave m{job.id, job.generation, node_id_, std::move(also)};
  if (!c.formed)
    return (void)send_link(c.coordinator, {LinkPending::Kind::kNotice, {}, job.id}, m, out);
  // Children whose leaves come after ours are passed on for a while.
  const bool direct = c.parent.empty() || c.beat_direct;
  LateLeaves& late = notices_.late_for(job.id);
  late.coordinator = c.coordinator;
  late.parent = direct ? "" : c.parent;
  late.generation = job.generation;
  late.num_nodes = c.num_nodes;
  late.world_size = c.world_size;
  late.until = Clock::now() + peer_timeout_;
  if (direct)
    return (void)send_link(c.coordinator, {LinkPending::Kind::kNotice, {}, job.id}, m, out);
  m.relay = true;
  send_link(c.parent, {LinkPending::Kind::kRelayNotice, {}, job.id, c.coordinator}, m, out);
}

bool NodeLinks::ask_job_waits(const ReplyTo& to, const Job& job, std::vector<Outgoing>& out) {
  auto lit = links_.find(job.cluster->coordinator);
  if (lit == links_.end() || lit->second.lost) return false;
  proto::JobWaits m{job.id, job.generation, node_id_};
  send_link(job.cluster->coordinator, {LinkPending::Kind::kJobWaits, to, job.id}, m, out);
  return true;
}

void NodeLinks::forget_relayed(const std::string& job) {
  for (auto& [name, l] : links_)
    std::erase_if(l.pending, [&](const auto& kv) {
      return kv.second.job == job && (kv.second.kind == LinkPending::Kind::kRelayBarrier ||
                                      kv.second.kind == LinkPending::Kind::kRelayGet);
    });
}

}  // namespace muster::daemon
