// State's hooks into its multi-node side: what the core asks of it without
// seeing its types.
#include "cluster/tables.hpp"

#include "core/state.hpp"

namespace muster::daemon {

ClusterTables* State::new_cluster_tables(Store& store) {
  return new ClusterTables(store);
}

void State::ClusterTablesDelete::operator()(ClusterTables* t) const {
  delete t;
}

size_t State::job_count() const {
  return jobs_.size() + cluster_->coordinator.size();
}

bool State::has_link(const std::string& link) const {
  return cluster_->links.count(link) != 0;
}

bool State::cluster_active() const {
  return !cluster_->coordinator.empty() || !cluster_->links.empty();
}

Job* State::global_store(const std::string& id) {
  return cluster_->coordinator.global_store(id);
}

void State::set_cluster(std::string node_id, std::chrono::milliseconds peer_timeout,
                        std::string unavailable, uint32_t tree_width) {
  node_id_ = std::move(node_id);
  peer_timeout_ = peer_timeout;
  peering_unavailable_ = std::move(unavailable);
  cluster_->coordinator.configure(peer_timeout, tree_width);
}

void State::keep_link(const std::string& coordinator) {
  cluster_->links[coordinator];
}

}  // namespace muster::daemon
