// The multi-node side of a daemon's state: the node's links to coordinators
// and its relays, and the coordinator of the jobs coordinated here. State holds one of these behind
// a pointer, so that the core never sees these types.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cluster/cluster.hpp"
#include "cluster/coordinator.hpp"
#include "protocol/envelope.hpp"

namespace muster::daemon {

struct ClusterTables {
  explicit ClusterTables(Store& store) : coordinator(store) {}

  std::map<std::string, Link> links;         // node side, by coordinator host:port
  std::map<std::string, RelayState> relays;  // node side, by job id
  Coordinator coordinator;                   // the jobs coordinated here
  uint64_t next_link_id = 1;

  // Sends m to the coordinator at `link` and remembers what to do with
  // its answer.
  template <class M>
  uint64_t send_link(const std::string& link, LinkPending p, const M& m,
                     std::vector<Outgoing>& out) {
    uint64_t id = next_link_id++;
    links[link].pending.emplace(id, std::move(p));
    out.push_back({{}, proto::encode(id, m), link});
    return id;
  }
};

}  // namespace muster::daemon
