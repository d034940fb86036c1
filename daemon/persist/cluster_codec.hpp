// A node's part of a multi-node job in the state file (jobs/job.hpp
// ClusterInfo): where its world is, so that a restarted daemon relays to
// the coordinator again, heartbeats, and sends its broadcasts the same way.
#pragma once

#include <string>

#include "jobs/job.hpp"
#include "protocol/codec.hpp"

namespace muster::daemon::cluster_codec {

void pack_cluster(codec::Packer& p, const ClusterInfo& c);
// Throws Error(kBadMessage) when the map does not decode.
ClusterInfo decode_cluster(const msgpack::object& o, const std::string& job);

}  // namespace muster::daemon::cluster_codec
