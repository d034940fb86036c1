// The NodeJoin a test sends the coordinator by hand, as a node daemon of
// this test's uid would (test_chain_peer.cpp, test_relay_early.cpp,
// test_relay_joins.cpp).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>

#include "protocol/cluster_messages.hpp"

namespace muster::test {

// Node node_id's join of job with one rank, of exactly 2 nodes, within
// 60 s, master 127.0.0.1:29500, owned by this uid; node_rank -1 leaves the
// rank to the coordinator.
inline proto::NodeJoin node_join(const std::string& job, const std::string& node_id,
                                 int64_t node_rank = -1) {
  proto::NodeJoin j;
  j.job = job;
  j.node_id = node_id;
  j.nproc = 1;
  j.node_rank = node_rank;
  j.min_nodes = j.max_nodes = 2;
  j.timeout_ms = 60000;
  j.master_addr = "127.0.0.1";
  j.master_port = 29500;
  j.owner_uid = static_cast<int64_t>(::getuid());
  return j;
}

}  // namespace muster::test
