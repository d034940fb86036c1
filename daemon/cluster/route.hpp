// Where a local rank's request is served (issue 44: decided once, here).
// Every request whose row of the message table is forwardable (the store,
// barriers, broadcasts, the samplers' progress) passes through route()
// before the dispatcher: a job of this node only is served by its row's
// handler; a job that spans nodes is served by its coordinator, reached
// through the relay tree, along the broadcast chain, or directly.
#pragma once

#include <cstdint>

#include "core/request.hpp"
#include "jobs/job.hpp"

namespace muster::daemon {

class Coordinator;
class NodeLinks;

enum class Route : uint8_t {
  kServeHere,        // this daemon's own job: its row's handler (dispatch)
  kCoordinatorHere,  // a broadcast of a job coordinated by this same daemon (State::bcast_here)
  kRelayBarrier,     // the node's subtree enters the barrier once, upstream (relays.cpp)
  kKept,             // a get of a set-once key the node's relay keeps: answered here
  kRelayWait,        // a get that may wait, or a wait: one upstream wait per key (relays.cpp)
  kChain,            // a broadcast node to node (ChainBroadcasts)
  kPool,             // a broadcast chunk to or from the rank's pool (bcast_pools.cpp)
  kForward,          // to the job's coordinator, in a Forward
};

const char* route_name(Route r);

// Where r goes. job: the job r names (scope_job made its key), null when
// there is none here (the handler then says unknown_job). Throws when the
// job spans nodes but cannot serve requests now: its world is not formed,
// or its generation broke, or (a broadcast of a job coordinated here) its
// round is not live at the job's generation (Coordinator::live_round).
// Reads the payload only where the type's route depends on it (a get's
// timeout and key, a pull's pool); changes nothing but the round's
// last contact (live_round hears from it, as forward_in does).
Route route(const Request& r, const Job* job, Coordinator& coordinator, const NodeLinks& node);
// The checks route() makes of a job that spans nodes: throws unavailable
// before its world formed, peer_exited once its generation broke.
void check_routable(const Job& job);

}  // namespace muster::daemon
