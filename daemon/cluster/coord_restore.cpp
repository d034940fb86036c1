// A coordinator's rounds brought back from the state file after its daemon
// restarted (persist/round_codec.hpp saves them). What was in memory only
// is rebuilt by the node daemons: they send their requests in flight again
// once their link reconnects (cluster/node.cpp), so barrier arrivals and
// key waits are counted anew, and the replies to the requests that changed
// something come from the saved reply cache.
#include <algorithm>
#include <atomic>

#include "cluster/coordinator.hpp"
#include "log.hpp"

namespace muster::daemon {

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
