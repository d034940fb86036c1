// State's hooks into its multi-node side: what the core asks of it without
// seeing its types.
#include "cluster/tables.hpp"

#include "core/state.hpp"

namespace muster::daemon {

ClusterTables* State::new_cluster_tables() {
  return new ClusterTables;
}

void State::ClusterTablesDelete::operator()(ClusterTables* t) const {
  delete t;
}

size_t State::job_count() const {
  return jobs_.size() + cluster_->coord.size();
}

bool State::has_link(const std::string& link) const {
  return cluster_->links.count(link) != 0;
}

bool State::cluster_active() const {
  return !cluster_->coord.empty() || !cluster_->links.empty();
}

Job* State::global_store(const std::string& id) {
  auto it = cluster_->coord.find(id);
  return it == cluster_->coord.end() ? nullptr : &it->second.store;
}

void State::keep_link(const std::string& coordinator) {
  cluster_->links[coordinator];
}

}  // namespace muster::daemon
