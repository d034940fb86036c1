// Multi-node requests of launchers: the rendezvous and the job's state.
#include "protocol/cluster_messages.hpp"
#include "session.hpp"

namespace muster {

Client::World Client::rendezvous(const std::string& job, const RendezvousOptions& o) {
  proto::Rendezvous m{job,          o.coordinator,       o.node_rank,       o.min_nodes,
                      o.max_nodes,  o.last_call.count(), o.timeout.count(), o.master_addr,
                      o.master_port};
  // The daemon answers when the world forms or the timeout passes there.
  auto w = session_->call<proto::World>(m, o.timeout + std::chrono::seconds(5));
  return {w.generation,
          w.node_rank,
          w.num_nodes,
          w.rank_offset,
          w.world_size,
          w.master_addr,
          static_cast<int>(w.master_port)};
}

Client::JobState Client::cluster_state(const std::string& job) {
  auto r = session_->call<proto::ClusterStateReply>(proto::ClusterState{job});
  return {r.event.generation, r.event.state, r.event.message};
}

}  // namespace muster
