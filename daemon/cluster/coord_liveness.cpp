// The coordinator's view of its nodes' liveness: heartbeats answered with
// what became of each job, rounds whose nodes went silent, and rounds
// brought back after a restart waiting to hear from their nodes again.
#include <algorithm>

#include <atomic>
#include "cluster/coordinator.hpp"
#include "log.hpp"

namespace muster::daemon {

namespace {

// Who is in an open round and what closes it, for the nodes' progress lines.
proto::Forming forming(const CoordJob& cj) {
  proto::Forming f;
  f.nodes = static_cast<uint32_t>(cj.nodes.size());
  for (const auto& n : cj.nodes) f.joined.push_back(n.name);
  std::sort(f.joined.begin(), f.joined.end());
  if (f.joined.size() > proto::kMaxFormingNames) f.joined.resize(proto::kMaxFormingNames);
  f.min_nodes = cj.min_nodes;
  f.max_nodes = cj.max_nodes;
  f.last_call_ms = cj.last_call_ms;
  if (cj.last_call)
    f.closes_in_ms = std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(*cj.last_call - Clock::now())
               .count());
  return f;
}

}  // namespace

proto::JobEvent Coordinator::event_for(const CoordJob& cj, const std::string& id, bool in_nodes,
                                       bool in_waiting, uint64_t generation) const {
  proto::JobEvent e{id, cj.generation, "", ""};
  // Nodes left in an older generation restart: as a failure, or (membership
  // change) not counted as one.
  ClusterPhase left_behind = cj.membership_change ? ClusterPhase::kWaiting : ClusterPhase::kBroken;
  ClusterPhase phase = ClusterPhase::kRunning;
  if (!cj.closed) {
    phase = in_nodes ? ClusterPhase::kForming : left_behind;
    if (phase == ClusterPhase::kForming)
      e.forming = forming(cj);
    else
      e.message = "generation " + std::to_string(cj.generation) + " is forming without this node" +
                  (cj.broken.empty() ? "" : ": " + cj.broken);
  } else if (generation != cj.generation || !in_nodes) {
    phase = in_waiting ? ClusterPhase::kForming : left_behind;
    e.message = "generation " + std::to_string(generation) + " was replaced by generation " +
                std::to_string(cj.generation);
  } else if (!cj.broken.empty()) {
    phase = ClusterPhase::kBroken;
    e.message = cj.broken;
  } else if (!cj.waiting.empty() && cj.nodes.size() < cj.max_nodes) {
    phase = ClusterPhase::kWaiting;
    e.message = std::to_string(cj.waiting.size()) + " node(s) wait to join generation " +
                std::to_string(cj.generation + 1);
  }
  e.state = to_string(phase);
  e.not_joined = !in_nodes && !in_waiting;
  return e;
}

proto::HeartbeatAck Coordinator::heartbeat(const proto::Heartbeat& m, std::vector<Outgoing>& out) {
  proto::HeartbeatAck ack;
  auto now = Clock::now();
  std::vector<std::string> ended;  // jobs whose last nodes left in this heartbeat
  for (const auto& jg : m.jobs) {
    auto it = rounds_.find(jg.job);
    if (it == rounds_.end()) {
      ack.events.push_back({jg.job, jg.generation, "unknown",
                            "the coordinator has no job '" + jg.job + "' (did it restart?)"});
      continue;
    }
    CoordJob& cj = it->second;
    // Which nodes the coordinator hears itself once a world is formed (the
    // rest through relays): for people tuning --tree-width, and for tests.
    if (cj.closed && log::enabled(log::Level::kDebug))
      log::debug(log::job(jg.job), "job=" + jg.job + " heartbeat from " + m.node_id +
                                       " for generation " + std::to_string(jg.generation) +
                                       " of the formed world: " + std::to_string(jg.below.size()) +
                                       " node(s) heard below, " + std::to_string(jg.left.size()) +
                                       " left");
    RoundNode* n = member(cj, m.node_id);
    if (n) {
      heard(cj);
      n->last_seen = now;
      // What its ranks wait in, for job_waits (coord_waits.cpp).
      if (cj.closed && jg.generation == cj.generation) {
        n->waits = jg.waits;
        n->waits_at = now;
        if (relayed(cj, jg, now)) ended.push_back(jg.job);
      }
    }
    RoundNode* w = find_node(cj.waiting, m.node_id);
    if (w) w->last_seen = now;
    ack.events.push_back(event_for(cj, jg.job, n != nullptr, w != nullptr, jg.generation));
  }
  for (const auto& job : ended) maybe_ended(job, out);
  return ack;
}

// What a relay's heartbeat says of the nodes below it (for a closed round
// of that generation, from one of its nodes): when each was last heard,
// what its ranks wait in, and whose part ended. True when some left.
bool Coordinator::relayed(CoordJob& cj, const proto::JobGeneration& jg, Clock::time_point now) {
  auto waits = waits_by_node(jg);
  for (const auto& b : jg.below) {
    RoundNode* n = member(cj, b.node_id);
    if (!n) continue;
    auto at = now - std::chrono::milliseconds(b.age_ms);
    if (at <= n->last_seen) continue;
    n->last_seen = at;
    auto w = waits.find(b.node_id);
    n->waits = w == waits.end() ? std::vector<proto::WaitStatus>{} : std::move(w->second);
    n->waits_at = at;
  }
  bool any = false;
  for (const auto& id : jg.left) any |= mark_left(cj, jg.job, jg.generation, id);
  return any;
}

void Coordinator::rounds_tick(Clock::time_point now, std::vector<Outgoing>& out) {
  for (auto it = rounds_.begin(); it != rounds_.end();) {
    CoordJob& cj = it->second;
    const std::string& id = it->first;
    if (cj.closed) {
      if (cj.broken.empty())
        for (const auto& n : cj.nodes)
          if (!n.left && now - n.last_seen > peer_timeout_) {
            break_round(cj,
                        node_name(n) + " lost: no heartbeat for " +
                            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                               now - n.last_seen)
                                               .count()) +
                            " ms",
                        out);
            break;
          }
    } else {
      // Nodes of a forming round that went silent or ran out of time (the
      // index of who joined is rebuilt at the next join).
      const size_t dropped = std::erase_if(cj.nodes, [&](const RoundNode& n) {
        if (now - n.last_seen > peer_timeout_) {
          log::warning(log::peer(n.node_id, id),
                       "job=" + id + " node " + n.node_id + " went silent during the rendezvous");
          return true;
        }
        if (now >= n.join_deadline) {
          fail(n.to, ErrorCode::kTimeout,
               "no world formed for job '" + id + "': " + std::to_string(cj.nodes.size()) +
                   " node(s) joined, at least " + std::to_string(cj.min_nodes) + " needed",
               out);
          return true;
        }
        return false;
      });
      if (dropped) cj.index.clear();
      if (cj.nodes.size() < cj.min_nodes) cj.last_call.reset();
      bool full = cj.nodes.size() >= cj.max_nodes;  // held while restored nodes come back
      if ((full || (cj.last_call && now >= *cj.last_call)) && !awaiting_restored(cj))
        close_round(cj, out);
    }
    std::erase_if(cj.waiting,
                  [&](const RoundNode& n) { return now - n.last_seen > peer_timeout_; });
    // A round restored after a restart has no nodes until they send their
    // joins again (an open round's are not saved): drop_quiet decides on
    // it, after the peer timeout, not the first tick.
    bool empty = cj.nodes.empty() && cj.waiting.empty() && !cj.restored_quiet;
    if (empty) {
      fail_store_waiters(cj.store, ErrorCode::kPeerExited, "job '" + id + "' has no nodes left",
                         out);
      samplers_.round_ended(id, cj, now, peer_timeout_);
      it = rounds_.erase(it);
      save_wanted_ = true;
    } else {
      ++it;
    }
  }
}

void Coordinator::tick(Clock::time_point now, std::vector<Outgoing>& out) {
  drop_quiet(now);
  rounds_tick(now, out);
  bcasts_.tick(now, out);
  samplers_.tick(now);
}

// A coordinator's rounds brought back from the state file after its daemon
// restarted (persist/round_codec.hpp saves them). What was in memory only
// is rebuilt by the node daemons: they send their requests in flight again
// once their link reconnects (cluster/node.cpp), so barrier arrivals and
// key waits are counted anew, and the replies to the requests that changed
// something come from the saved reply cache.
uint64_t next_round_incarnation() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

void Coordinator::restore(const std::string& job, CoordJob cj) {
  auto now = Clock::now();
  cj.incarnation = next_round_incarnation();
  cj.store.id = job;
  cj.store.global = true;
  // Silence is counted from now: the nodes could not reach a daemon that
  // was not there.
  for (auto* v : {&cj.nodes, &cj.waiting})
    for (auto& n : *v) {
      n.last_seen = now;
      n.join_deadline = now + std::chrono::minutes(15);
      // Where a World went before the restart (a connection's routing id,
      // or this daemon's own node side, whose pending join died with it):
      // the node sends its join again, and that says where.
      n.restored = !cj.closed;
      if (n.restored) n.to = ReplyTo{};
    }
  // An open round closes no sooner than its nodes can be back: a World
  // sent before a node's link reconnected would be lost, and the join it
  // sends again would look like a restart of that node.
  if (!cj.closed && cj.nodes.size() >= cj.min_nodes)
    cj.last_call = now + std::max<std::chrono::milliseconds>(
                             std::chrono::milliseconds(cj.last_call_ms), peer_timeout_ / 2);
  cj.restored_bcast_seq = cj.bcast_seq;
  cj.restored_quiet = now;
  log::notice(log::job(job), "job=" + job + " (coordinated here) restored at generation " +
                                 std::to_string(cj.generation) + (cj.closed ? "" : " (forming)") +
                                 ", " + std::to_string(cj.nodes.size()) + " node(s)");
  rounds_[job] = std::move(cj);
}

bool Coordinator::awaiting_restored(const CoordJob& cj) {
  return std::any_of(cj.nodes.begin(), cj.nodes.end(),
                     [](const RoundNode& n) { return n.restored; });
}

size_t Coordinator::size() const {
  size_t n = 0;
  for (const auto& [id, cj] : rounds_) n += !cj.restored_quiet;
  return n;
}

// A node of the round was heard from: the round is live again.
CoordJob& Coordinator::heard(CoordJob& cj) {
  if (!cj.restored_quiet) return cj;
  cj.restored_quiet.reset();
  log::info(log::job(cj.store.id), "job=" + cj.store.id + " (restored) heard from its nodes again");
  return cj;
}

// Restored rounds no node came back to within the peer timeout: their job
// ended while this daemon was down (or its nodes died with it).
void Coordinator::drop_quiet(Clock::time_point now) {
  std::erase_if(rounds_, [&](auto& kv) {
    auto& [id, cj] = kv;
    if (!cj.restored_quiet || now - *cj.restored_quiet <= peer_timeout_) return false;
    log::notice(log::job(id), "job=" + id + " (restored) dropped: no node came back within " +
                                  std::to_string(peer_timeout_.count()) + " ms of the restart");
    save_wanted_ = true;
    return true;
  });
}

}  // namespace muster::daemon
