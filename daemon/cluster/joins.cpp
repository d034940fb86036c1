// Joins through relays. A node told to join via a relay (muster run
// --join-via) sends its NodeJoin there; the relay holds its children's
// joins for kJoinBatch and passes them to the job's coordinator as one
// NodeJoins, each under a request id of its own link, and the coordinator
// answers the Worlds of that relay's children in one Replies (coordinator.cpp).
// So the coordinator of 12,500 nodes hears a few hundred batches, not
// 12,500 joins. A relay that cannot pass a join on (no part of the job
// here within kJoinHold, too many held, a coordinator that refuses the
// batch) answers with an error, and the node joins the coordinator itself;
// so does a node whose relay went silent (the coordinator's answer to its
// heartbeat says that it has not heard of the node's join).
#include <algorithm>

#include "cluster/node_links.hpp"
#include "log.hpp"

namespace muster::daemon {

using proto::MsgType;

namespace {

constexpr const char* kVia = "via";  // LinkPending::key of a join sent to a relay

}  // namespace

void NodeLinks::relay_join(const ReplyTo& to, proto::NodeJoin m, std::vector<Outgoing>& out) {
  const Job* job = jobs_.find(m.job);
  if (job && job->owner_uid >= 0 && m.owner_uid != job->owner_uid)
    throw Error(ErrorCode::kPermissionDenied, "job '" + m.job + "' on this node belongs to uid " +
                                                  std::to_string(job->owner_uid) + "; node " +
                                                  m.node_id + " joins it for uid " +
                                                  std::to_string(m.owner_uid));
  if (job && job->cluster && job->cluster->coordinator.empty())
    throw Error(ErrorCode::kUnavailable, "job '" + m.job + "' has no coordinator here");
  size_t held = 0;
  for (const auto& [id, h] : joins_) held += h.joins.size();
  auto& h = joins_[m.job];
  // A join sent again (the child's link reconnected) takes its place.
  for (auto& [t, j] : h.joins)
    if (j.node_id == m.node_id) {
      m.relay = false;
      t = to;
      j = std::move(m);
      return;
    }
  if (held >= kMaxHeldJoins) {
    if (h.joins.empty()) joins_.erase(m.job);
    throw Error(ErrorCode::kUnavailable, "this daemon holds " + std::to_string(held) +
                                             " joins already; join the coordinator directly");
  }
  if (h.joins.empty()) h.first = Clock::now();
  m.relay = false;  // for the coordinator
  h.joins.push_back({to, std::move(m)});
  if (job && job->cluster && h.joins.size() >= proto::kMaxBatchedJoins)
    flush_joins(job->id, *job, h, out);
}

void NodeLinks::flush_joins(const std::string& id, const Job& job, HeldJoins& h,
                            std::vector<Outgoing>& out) {
  // At most kMaxBatchedJoins a batch (the coordinator refuses more).
  while (h.joins.size() > proto::kMaxBatchedJoins) {
    HeldJoins part;
    part.joins.assign(std::make_move_iterator(h.joins.begin()),
                      std::make_move_iterator(h.joins.begin() + proto::kMaxBatchedJoins));
    h.joins.erase(h.joins.begin(), h.joins.begin() + proto::kMaxBatchedJoins);
    flush_joins(id, job, part, out);
  }
  const std::string& coordinator = job.cluster->coordinator;
  proto::NodeJoins batch{id, {}};
  LinkPending bp{LinkPending::Kind::kRelayJoins, {}, id};
  const bool here = here_ && here_(coordinator, id);
  Link& l = links_[coordinator];
  for (auto& [to, j] : h.joins) {
    const uint64_t inner = next_link_id_++;
    std::string frame = proto::encode(inner, j);
    LinkPending p{LinkPending::Kind::kRelayJoin, to, id};
    p.here = here;
    if (!here) p.frame = frame;  // sent again alone if the link reconnects
    l.pending.emplace(inner, std::move(p));
    bp.inner.push_back(inner);
    batch.joins.push_back({std::move(frame)});
  }
  log::debug(log::job(id), "job=" + id + " passes " + std::to_string(h.joins.size()) +
                               " child join(s) on to " + coordinator);
  h.joins.clear();
  const uint64_t sent = send_link(coordinator, std::move(bp), batch, out);
  links_[coordinator].pending[sent].frame.clear();  // its joins go again alone, not it
}

void NodeLinks::joins_tick(Clock::time_point now, std::vector<Outgoing>& out) {
  for (auto it = joins_.begin(); it != joins_.end();) {
    HeldJoins& h = it->second;
    const Job* job = jobs_.find(it->first);
    if (!h.joins.empty() && job && job->cluster && now - h.first >= kJoinBatch)
      flush_joins(it->first, *job, h, out);
    if (!h.joins.empty() && now - h.first >= kJoinHold) {
      for (const auto& [to, j] : h.joins)
        fail(to, ErrorCode::kUnavailable,
             "this daemon has no part of job '" + it->first +
                 "' to pass joins on through; join the coordinator directly",
             out);
      h.joins.clear();
    }
    it = h.joins.empty() ? joins_.erase(it) : std::next(it);
  }
}

// A Replies from the coordinator: each frame as if it had come alone (one
// level: a Replies inside one is dropped).
void NodeLinks::on_replies(const std::string& link, const proto::Envelope& env,
                           std::vector<Outgoing>& out) {
  auto m = proto::Replies::unpack(env.payload);
  for (auto& r : m.replies) {
    try {
      auto inner = proto::decode_envelope(r.frame.data(), r.frame.size());
      if (static_cast<MsgType>(inner.type) == MsgType::kReplies) continue;
    } catch (const proto::EnvelopeError&) {
      continue;
    }
    on_link_frame(link, r.frame.data(), r.frame.size(), out);
  }
}

// The answer to a child's join (passed on as it came), or to a batch.
void NodeLinks::join_answered(const LinkPending& p, const proto::Envelope& env,
                              std::vector<Outgoing>& out) {
  if (p.kind == LinkPending::Kind::kRelayJoin) {
    out.push_back({p.to, proto::encode_object(p.to.request_id, env.type, env.payload), {}});
    return;
  }
  if (static_cast<MsgType>(env.type) != MsgType::kErrorReply) return;
  // The coordinator took none of them: each child joins it itself.
  const std::string why = "the coordinator refused this relay's batch of joins (" +
                          proto::ErrorReply::unpack(env.payload).message +
                          "); join the coordinator directly";
  for (auto& [name, l] : links_)
    for (uint64_t id : p.inner)
      if (auto it = l.pending.find(id);
          it != l.pending.end() && it->second.kind == LinkPending::Kind::kRelayJoin) {
        fail(it->second.to, ErrorCode::kUnavailable, why, out);
        l.pending.erase(it);
      }
}

// This node's join went to a relay that could not pass it on: it goes to
// the coordinator now, as it would have without --join-via.
void NodeLinks::join_direct(const LinkPending& p, const std::string& why,
                            std::vector<Outgoing>& out) {
  Job* job = jobs_.find(p.job);
  if (!job || !job->cluster || job->cluster->formed || p.frame.empty()) return;
  ClusterInfo& c = *job->cluster;
  auto env = proto::decode_envelope(p.frame.data(), p.frame.size());
  auto j = proto::NodeJoin::unpack(env.payload);
  j.relay = false;
  log::notice(log::job(p.job), "job=" + p.job + " join through " + c.via + " did not go (" + why +
                                   "): joins the coordinator " + c.coordinator + " itself");
  c.via.clear();
  send_link(c.coordinator, {LinkPending::Kind::kRendezvous, p.to, p.job}, j, out);
}

// The coordinator's word on a job of this node still forming: who is there
// (cluster_state prints it), and whether it has this node's join at all.
void NodeLinks::forming_answered(const Job& job, const proto::JobEvent& e, Clock::time_point now,
                                 std::vector<Outgoing>& out) {
  if (e.state == "forming") {
    if (e.forming.max_nodes > 0) forming_[e.job] = {e.forming, now};
    via_doubt_.erase(e.job);  // its join is there
  } else if (e.not_joined || e.state == "unknown") {
    maybe_join_direct(job, now, out);  // its join was lost at a relay?
  }
}

// The coordinator answered this node's heartbeat for a job still forming
// without naming it a member: if its join has been with a relay for
// kViaGrace, the relay lost it (or died). Only an answer that says so
// (not_joined, or no round at all): a member whose World is on its way
// through the relay would break its generation by joining again.
void NodeLinks::maybe_join_direct(const Job& job, Clock::time_point now,
                                  std::vector<Outgoing>& out) {
  if (!job.cluster || job.cluster->formed || job.cluster->via.empty()) return;
  // Counted from the first such answer: a coordinator that restarted (its
  // open rounds come back empty) hears the relay's join again soon.
  auto [doubt, fresh] = via_doubt_.try_emplace(job.id, now);
  if (now - doubt->second < kViaGrace) return;
  auto lit = links_.find(job.cluster->via);
  if (lit == links_.end()) return;
  for (auto it = lit->second.pending.begin(); it != lit->second.pending.end(); ++it) {
    const LinkPending& p = it->second;
    if (p.kind != LinkPending::Kind::kRendezvous || p.job != job.id || p.key != kVia ||
        now - p.sent < kViaGrace)
      continue;
    // Kept: should the relay pass the join on after all, its World is
    // taken as well as the coordinator's (world_arrived takes the first).
    return join_direct(p, "the coordinator has not heard of it", out);
  }
}

void NodeLinks::drop_joins(const std::string& job, std::vector<Outgoing>& out) {
  const std::string why = "this daemon's part of job '" + job +
                          "' ended before its world formed; join the coordinator directly";
  if (auto it = joins_.find(job); it != joins_.end()) {
    for (const auto& [to, j] : it->second.joins) fail(to, ErrorCode::kUnavailable, why, out);
    joins_.erase(it);
  }
  for (auto& [name, l] : links_)
    std::erase_if(l.pending, [&](const auto& kv) {
      const LinkPending& p = kv.second;
      if (p.job != job) return false;
      if (p.kind == LinkPending::Kind::kRelayJoin) fail(p.to, ErrorCode::kUnavailable, why, out);
      return p.kind == LinkPending::Kind::kRelayJoin || p.kind == LinkPending::Kind::kRelayJoins;
    });
}

void NodeLinks::drop_rendezvous(const std::string& job) {
  via_doubt_.erase(job);
  for (auto& [name, l] : links_)
    std::erase_if(l.pending, [&](const auto& kv) {
      return kv.second.kind == LinkPending::Kind::kRendezvous && kv.second.job == job;
    });
}

}  // namespace muster::daemon
