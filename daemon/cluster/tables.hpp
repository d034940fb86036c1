// The multi-node side of a daemon's state: the node's links to coordinators
// and its relays (NodeLinks), and the Coordinator of the jobs coordinated
// here. State holds one of these behind a pointer, so that the core never
// sees these types.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cluster/cluster.hpp"
#include "cluster/coordinator.hpp"
#include "cluster/node_links.hpp"
#include "protocol/envelope.hpp"

namespace muster::daemon {

struct ClusterTables {
  ClusterTables(Store& store, JobTable& jobs) : node(jobs), coordinator(store) {}

  NodeLinks node;           // this daemon's part in jobs coordinated elsewhere
  Coordinator coordinator;  // the jobs coordinated here
};

}  // namespace muster::daemon
