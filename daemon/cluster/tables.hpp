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
  ClusterTables(Store& store, JobTable& jobs) : node(jobs), coordinator(store) {
    node.set_here([this, &jobs](const std::string& link, const std::string& id) {
      const Job* job = jobs.find(id);
      return job && job->cluster && job->cluster->coordinator == link &&
             coordinator.has_node(id, job->generation, node.node_id());
    });
  }

  NodeLinks node;           // this daemon's part in jobs coordinated elsewhere
  Coordinator coordinator;  // the jobs coordinated here
};

}  // namespace muster::daemon
