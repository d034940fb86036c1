// Heartbeats of a node daemon, and their way through the relay tree. Once a
// job's world is formed, a node with a parent beats to it: the parent
// answers for the job from what it knows (the world is one round; its
// word is the coordinator's, with how old it is), and its own heartbeat
// carries up whom it heard below and whose part of the job ended. So the
// coordinator hears O(width) heartbeats and leaves, not one per node. A
// parent silent for half the peer timeout, or one that cannot speak for
// the job, is passed over: the node beats to the coordinator itself.
#include <algorithm>
#include <set>

#include "cluster/node_links.hpp"
#include "log.hpp"
#include "protocol/limits.hpp"

namespace muster::daemon {

using proto::MsgType;

namespace {

constexpr const char* kAskCoordinator = "ask_coordinator";

// The waits of nodes below one heartbeat carries at most (each with up to
// 8 ranks named is ~75 MessagePack objects: well inside a frame's budget).
constexpr size_t kMaxBelowWaits = 4096;

int64_t age_ms(Clock::duration d) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  return std::clamp<int64_t>(ms, 0, muster::limits::kMaxTimeoutMs);
}

}  // namespace

// What the coordinator (or the parent, for it) says of this node's jobs in
// answer to a heartbeat.
void NodeLinks::heartbeat_answered(const std::string& link, const LinkPending& p,
                                   const proto::Envelope& env, std::vector<Outgoing>& out) {
  if (static_cast<MsgType>(env.type) == MsgType::kErrorReply) {
    // A parent that refuses relayed heartbeats (too many below, say) is
    // passed over as a silent one is.
    for (const auto& [id, generation] : p.asked)
      if (Job* job = jobs_.find(id); job && job->cluster && job->cluster->beat_to() == link &&
                                     link != job->cluster->coordinator) {
        log::notice(log::job(id), "job=" + id + " relay " + link + " refused a heartbeat (" +
                                      proto::ErrorReply::unpack(env.payload).message +
                                      "): heartbeats go to the coordinator");
        job->cluster->beat_direct = true;
      }
    return;
  }
  if (static_cast<MsgType>(env.type) != MsgType::kHeartbeatAck) return;
  const auto now = Clock::now();
  std::vector<const Job*> ask;  // jobs the parent could not speak for
  for (const auto& e : proto::HeartbeatAck::unpack(env.payload).events) {
    Job* job = jobs_.find(e.job);
    if (!job || !job->cluster) continue;
    ClusterInfo& c = *job->cluster;
    if (!c.formed) {  // the World will say how it ends; until then, who is there
      if (link == c.coordinator) forming_answered(*job, e, now, out);
      continue;
    }
    if (auto a = p.asked.find(e.job); a == p.asked.end() || a->second != job->generation)
      continue;  // asked about a generation that is over here
    if (e.state == kAskCoordinator) {
      // Its World may be on the way (the coordinator sends a round's at
      // once): the coordinator hears this one, the parent is tried again.
      log::debug(log::job(e.job), "job=" + e.job + " relay " + link + " cannot speak for it (" +
                                      e.message + "): this heartbeat goes to the coordinator");
      ask.push_back(job);
      continue;
    }
    // The children's leaves this heartbeat carried are passed on (those
    // an earlier answer passed on already are not counted twice).
    auto rit = relays_.all().find(e.job);
    if (auto s = p.left_sent.find(e.job); s != p.left_sent.end() && rit != relays_.all().end() &&
                                          rit->second.below_generation == job->generation) {
      RelayState& r = rit->second;
      size_t k = s->second > r.left_base ? std::min(s->second - r.left_base, r.left.size()) : 0;
      r.left.erase(r.left.begin(), r.left.begin() + k);
      r.left_base += k;
    }
    // A parent's answer says when its end of the tree last heard the
    // coordinator: that is how fresh this node's word of it is.
    if (link != c.coordinator) {
      Link& coord = links_[c.coordinator];
      coord.last_heard = std::max(coord.last_heard, now - std::chrono::milliseconds(e.heard_ms));
    }
    if (to_string(c.phase) != e.state && e.state != "running")
      log::notice(log::job(e.job), "job=" + e.job + " is " + e.state + ": " + e.message);
    // "unknown": the coordinator has no such job (it restarted, say). A word
    // of a newer coordinator that this daemon does not know changes nothing.
    if (e.state == "unknown")
      c.phase = ClusterPhase::kBroken;
    else if (auto phase = cluster_phase_from_string(e.state))
      c.phase = *phase;
    c.message = e.message;
    // Waits relayed for a world that is over would never be answered.
    // (Waiting nodes end the world only once a member restarts.)
    if (c.phase == ClusterPhase::kBroken)
      relays_.fail(e.job, ErrorCode::kPeerExited,
                   "job '" + e.job + "' generation " + std::to_string(job->generation) +
                       " cannot go on: " + e.message,
                   out);
  }
  if (!ask.empty()) {
    std::map<std::string, std::vector<const Job*>> by_coordinator;
    for (const Job* job : ask) by_coordinator[job->cluster->coordinator].push_back(job);
    for (const auto& [coordinator, jobs] : by_coordinator)
      beat(coordinator, links_[coordinator], jobs, false, now, out);
  }
}

proto::HeartbeatAck NodeLinks::relay_heartbeat(const proto::Heartbeat& m) {
  const auto now = Clock::now();
  proto::HeartbeatAck ack;
  for (const auto& jg : m.jobs) {
    const Job* job = jobs_.find(jg.job);
    if (!job || !job->cluster || !job->cluster->formed || job->generation != jg.generation) {
      ack.events.push_back({jg.job, jg.generation, kAskCoordinator,
                            "no world of job '" + jg.job + "' at generation " +
                                std::to_string(jg.generation) + " is formed here"});
      continue;
    }
    const ClusterInfo& c = *job->cluster;
    RelayState& r = relays_.of(jg.job);
    if (r.below_generation != job->generation) {
      r.below.clear();
      r.left.clear();
      r.left_base = 0;
      r.exited.clear();
      r.below_generation = job->generation;
    }
    // At most a world's nodes below, and their leaves: past that, the
    // child asks the coordinator itself (a relay holds no more than it
    // could need).
    if (r.below.size() + jg.below.size() > c.num_nodes ||
        r.left.size() + jg.left.size() > c.num_nodes) {
      ack.events.push_back({jg.job, jg.generation, kAskCoordinator,
                            "this relay holds " + std::to_string(r.below.size()) +
                                " nodes below and " + std::to_string(r.left.size()) + " leaves"});
      continue;
    }
    r.below[m.node_id] = {now, jg.waits};  // at most kMaxWaits (the wire's bound)
    auto waits = waits_by_node(jg);
    for (const auto& b : jg.below) {
      auto at = now - std::chrono::milliseconds(b.age_ms);
      auto& h = r.below[b.node_id];
      if (h.at > at) continue;
      h.at = at;
      auto w = waits.find(b.node_id);
      h.waits = w == waits.end() ? std::vector<proto::WaitStatus>{} : std::move(w->second);
      if (h.waits.size() > proto::kMaxWaits) h.waits.resize(proto::kMaxWaits);
    }
    for (const auto& id : jg.left) r.below.erase(id);
    r.left.insert(r.left.end(), jg.left.begin(), jg.left.end());
    auto coord = links_.find(c.coordinator);
    proto::JobEvent e{jg.job, job->generation, to_string(c.phase), c.message};
    e.heard_ms = age_ms(coord == links_.end() ? Clock::duration(peer_timeout_)
                                              : now - coord->second.last_heard);
    ack.events.push_back(std::move(e));
  }
  return ack;
}

proto::JobGeneration NodeLinks::beat_entry(const Job& job, Clock::time_point now,
                                           LinkPending& beat) {
  proto::JobGeneration jg{job.id, job.generation, relays_.waits(job, now)};
  beat.asked[job.id] = job.generation;
  auto rit = relays_.all().find(job.id);
  if (rit == relays_.all().end() || rit->second.below_generation != job.generation) return jg;
  RelayState& r = rit->second;
  std::erase_if(r.below, [&](const auto& kv) { return now - kv.second.at > peer_timeout_; });
  for (const auto& [id, h] : r.below) {
    jg.below.push_back({id, age_ms(now - h.at)});
    // Waits are advice for status (liveness is not): a frame's worth.
    for (const auto& w : h.waits)
      if (jg.below_waits.size() < kMaxBelowWaits) jg.below_waits.push_back({id, w});
  }
  // Sent again with every heartbeat until one carrying them is answered.
  jg.left = r.left;
  if (!r.left.empty()) beat.left_sent[job.id] = r.left_base + r.left.size();
  return jg;
}

void NodeLinks::beat(const std::string& link, Link& l, const std::vector<const Job*>& jobs,
                     bool relay, Clock::time_point now, std::vector<Outgoing>& out) {
  LinkPending p{LinkPending::Kind::kHeartbeat, {}, {}};
  proto::Heartbeat m{node_id_, {}, relay};
  for (const Job* job : jobs) m.jobs.push_back(beat_entry(*job, now, p));
  if (!l.beat_unanswered) l.beat_unanswered = now;
  send_link(link, std::move(p), m, out);
}

void NodeLinks::pass_over_silent(Clock::time_point now) {
  for (auto& [link, l] : links_) {
    if (!l.beat_unanswered || now - *l.beat_unanswered <= peer_timeout_ / 2) continue;
    for (auto& [id, job] : jobs_) {
      if (!job.cluster || job.cluster->beat_direct || job.cluster->beat_to() != link ||
          link == job.cluster->coordinator)
        continue;
      log::notice(log::job(id), "job=" + id + " relay " + link +
                                    " did not answer a heartbeat in half the peer timeout: " +
                                    "heartbeats go to the coordinator " + job.cluster->coordinator);
      job.cluster->beat_direct = true;
    }
    l.beat_unanswered.reset();  // its next heartbeat (another job's) starts afresh
  }
}

void NodeLinks::tick(Clock::time_point now, std::vector<Outgoing>& out) {
  pass_over_silent(now);
  pools_.expire(now);
  forget_shared_pulls();
  chain_.tick(now, out);
  notices_.tick(now, out);
  joins_tick(now, out);
  // Where each job's heartbeat goes (relay: to a parent, as its child).
  std::map<std::string, std::map<bool, std::vector<const Job*>>> beats;
  std::set<std::string> coordinators;
  for (const auto& [id, job] : jobs_)
    if (job.cluster) {
      const ClusterInfo& c = *job.cluster;
      bool relay = c.formed && !c.parent.empty() && !c.beat_direct;
      beats[c.beat_to()][relay].push_back(&job);
      coordinators.insert(c.coordinator);
    }
  for (const auto& [link, groups] : beats) links_[link];
  for (auto lit = links_.begin(); lit != links_.end();) {
    const std::string& link = lit->first;
    Link& l = lit->second;
    auto bit = beats.find(link);
    bool coordinates = coordinators.count(link) != 0;
    bool waiting = std::any_of(l.pending.begin(), l.pending.end(), [](const auto& kv) {
      // A self pull of a broadcast along the chain is a notice that waits.
      return kv.second.kind != LinkPending::Kind::kHeartbeat &&
             (kv.second.kind != LinkPending::Kind::kNotice || kv.second.bcast);
    });
    if (bit == beats.end() && !coordinates && !waiting) {
      // Nothing left to do with this coordinator: forget it (the server
      // closes the connection once no Outgoing names it any more).
      if (now - l.last_heard > peer_timeout_ || l.pending.empty()) {
        lit = links_.erase(lit);
        continue;
      }
    }
    // Silence means something only of a coordinator (a parent's answers
    // and heartbeats keep its word fresh); a parent in the tree answers a
    // barrier when its subtree is done, which may take long, and its loss
    // reaches us through the coordinator.
    if (coordinates && !l.lost && now - l.last_heard > peer_timeout_) link_lost(link, l, out);
    if (bit != beats.end() && now >= l.next_beat) {
      // Heard from below: beat four times as often, so that a node's word
      // reaches the coordinator within the peer timeout through up to
      // eleven relays (T/4 + 11 x T/16 < T; width 2 reaches 4,000 nodes
      // in 11 levels, the default 16 more than any job).
      bool relays = false;
      for (const auto& [relay, jobs] : bit->second)
        for (const Job* job : jobs)
          if (auto r = relays_.all().find(job->id);
              r != relays_.all().end() && !r->second.below.empty())
            relays = true;
      l.next_beat = now + peer_timeout_ / (relays ? 16 : 4);
      // Only the newest heartbeat's answer matters.
      std::erase_if(l.pending,
                    [](const auto& kv) { return kv.second.kind == LinkPending::Kind::kHeartbeat; });
      for (const auto& [relay, jobs] : bit->second) beat(link, l, jobs, relay, now, out);
    }
    ++lit;
  }
}

}  // namespace muster::daemon
