// route(): see route.hpp. The routes are tried in the order a request of
// each kind needs them; State::route_away (peer_requests.cpp) sends the request
// where this says, from the one place that calls it (State::handle).
#include "cluster/route.hpp"

#include <iterator>

#include "cluster/coordinator.hpp"
#include "cluster/node_links.hpp"

#include "protocol/cluster_messages.hpp"
#include "protocol/messages.hpp"

namespace muster::daemon {

using proto::MsgType;

const char* route_name(Route r) {
  // In Route's order (route.hpp).
  static constexpr const char* kNames[] = {"serve_here", "coordinator_here", "relay_barrier",
                                           "kept",       "relay_wait",       "chain",
                                           "pool",       "forward"};
  const auto i = static_cast<size_t>(r);
  return i < std::size(kNames) ? kNames[i] : "?";
}

namespace {

// A broadcast of a job coordinated by this same daemon goes to the
// coordinator here, not through this daemon's connection to itself: each
// chunk skips the copies into a Forward, the loopback TCP and the copy out
// of it. Not along the chain (the node side's), nor a pull into the rank's
// pool (its answer is written there when it comes back to the node side).
bool coordinated_here(const Request& r, const Job& job, Coordinator& coordinator,
                      const NodeLinks& node) {
  const ClusterInfo& c = *job.cluster;
  if (!c.formed || !c.chain_prev.empty()) return false;
  if (!coordinator.has_node(job.id, job.generation, node.node_id())) return false;
  // The round is checked first, as forward_in checks it: a request of a
  // generation that is not live is refused here, with the job named as
  // its sender names it, whichever way it would have gone.
  coordinator.live_round(job.id, job.generation, "request");
  if (r.t.type != MsgType::kBcastPull) return true;
  auto pull = proto::BcastPull::unpack(r.env.payload);
  if (pull.shared)
    throw Error(ErrorCode::kInvalidArgument,
                "bcast_pull: `shared` is for a node daemon to ask its coordinator");
  return !pull.pool.set();
}

// A broadcast through a link: along the chain when the job's nodes serve
// one another, else to the coordinator, with the rank's pool or without.
Route broadcast_route(const Request& r, const Job& job) {
  if (!job.cluster->chain_prev.empty()) return Route::kChain;
  if (r.t.type == MsgType::kBcastPull) {
    auto pull = proto::BcastPull::unpack(r.env.payload);
    if (pull.shared)
      throw Error(ErrorCode::kInvalidArgument,
                  "bcast_pull: `shared` is for a node daemon to ask its coordinator");
    return pull.pool.set() ? Route::kPool : Route::kForward;
  }
  if (r.t.type == MsgType::kBcastPush)
    return proto::BcastPushView::unpack(r.env.payload).pool.set() ? Route::kPool : Route::kForward;
  return Route::kForward;
}

}  // namespace

void check_routable(const Job& job) {
  const ClusterInfo& c = *job.cluster;
  if (!c.formed)
    throw Error(ErrorCode::kUnavailable, "job '" + job.id +
                                             "' has not formed its world yet (rendezvous through " +
                                             c.coordinator + ")");
  if (c.phase == ClusterPhase::kBroken)
    throw Error(ErrorCode::kPeerExited, "job '" + job.id + "' generation " +
                                            std::to_string(job.generation) +
                                            " cannot go on: " + c.message);
}

Route route(const Request& r, const Job* job, Coordinator& coordinator, const NodeLinks& node) {
  if (r.to.from_peer || !r.t.forwardable || !job || !job->cluster) return Route::kServeHere;
  // Before the checks below: the coordinator checks its round itself.
  if (r.t.area == proto::Area::kBcast && coordinated_here(r, *job, coordinator, node))
    return Route::kCoordinatorHere;
  check_routable(*job);
  switch (r.t.area) {
    case proto::Area::kBarrier:
      return Route::kRelayBarrier;
    case proto::Area::kBcast:
      return broadcast_route(r, *job);
    default:
      break;
  }
  if (r.t.type == MsgType::kStoreGet) {
    auto get = proto::StoreGet::unpack(r.env.payload);
    if (node.relays().kept(*job, get.key)) return Route::kKept;
    return get.timeout_ms > 0 ? Route::kRelayWait : Route::kForward;
  }
  return r.t.type == MsgType::kStoreWait ? Route::kRelayWait : Route::kForward;
}

}  // namespace muster::daemon
