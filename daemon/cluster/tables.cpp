// State's hooks into its multi-node side: what the core asks of it without
// seeing its types.
#include "cluster/tables.hpp"

#include "core/state.hpp"

namespace muster::daemon {

ClusterTables* State::new_cluster_tables(Store& store, JobTable& jobs) {
  return new ClusterTables(store, jobs);
}

void State::ClusterTablesDelete::operator()(ClusterTables* t) const {
  delete t;
}

size_t State::job_count() const {
  return jobs_.size() + cluster_->coordinator.size();
}

bool State::has_link(const std::string& link) const {
  return cluster_->node.has_link(link);
}

bool State::cluster_active() const {
  return !cluster_->coordinator.empty() || cluster_->node.active();
}

Job* State::global_store(const std::string& id) {
  return cluster_->coordinator.global_store(id);
}

void State::set_cluster(std::string node_id, std::chrono::milliseconds peer_timeout,
                        std::string unavailable, uint32_t tree_width) {
  cluster_->node.configure(std::move(node_id), peer_timeout, std::move(unavailable));
  cluster_->coordinator.configure(peer_timeout, tree_width);
}

void State::set_node_name(std::string name) {
  cluster_->node.set_name(std::move(name));
}

void State::keep_link(const std::string& coordinator) {
  cluster_->node.keep(coordinator);
}

void State::set_peer_endpoint(std::string endpoint) {
  cluster_->node.set_peer_endpoint(std::move(endpoint));
}

void State::on_link_frame(const std::string& link, void* data, size_t size,
                          std::vector<Outgoing>& out, std::shared_ptr<void> held) {
  cluster_->node.on_link_frame(link, data, size, out, std::move(held));
}

void State::cluster_tick(Clock::time_point now, std::vector<Outgoing>& out) {
  cluster_->coordinator.tick(now, out);
  cluster_->node.tick(now, out);
}

bool State::maybe_forward(const ReplyTo& to, const proto::Envelope& env,
                          std::vector<Outgoing>& out) {
  if (bcast_here(to, env, out)) return true;
  return cluster_->node.maybe_forward(to, env, out);
}

// A broadcast request of a job whose coordinator is this daemon too (node
// 0's usually, which most often holds the root) goes to the coordinator
// here, not through this daemon's connection to itself: each chunk skips
// the copies into a Forward, the loopback TCP and the copy out of it. The
// checks are forward_in's: the world is formed, at this generation, whole.
bool State::bcast_here(const ReplyTo& to, const proto::Envelope& env, std::vector<Outgoing>& out) {
  const proto::MessageTraits* t = proto::message_traits(env.type);
  if (to.from_peer || !t || t->area != proto::Area::kBcast) return false;
  codec::MapReader r(env.payload, proto::type_name(env.type));
  const Job* job = jobs_.find(proto::read_job_id(r));
  if (!job || !job->cluster || !job->cluster->formed) return false;
  Coordinator& c = cluster_->coordinator;
  if (!c.has_node(job->id, job->generation, cluster_->node.node_id())) return false;
  c.live_round(job->id, job->generation, "request");
  forwarding_job_ = job->id;
  struct Reset {
    std::string& s;
    ~Reset() { s.clear(); }
  } reset{forwarding_job_};
  bcast_request(to, env, out);
  return true;
}

void State::rendezvous(const ReplyTo& to, const proto::Envelope& env, std::vector<Outgoing>& out) {
  cluster_->node.rendezvous(to, env, out);
}

proto::JobEvent State::cluster_state(const std::string& job) const {
  return cluster_->node.cluster_state(job);
}

void State::cluster_slot_ended(Job& job, uint32_t local_rank, const char* why,
                               std::vector<Outgoing>& out) {
  cluster_->node.slot_ended(job, local_rank, why, out);
}

void State::cluster_job_removed(Job& job, std::vector<Outgoing>& out) {
  cluster_->node.job_removed(job, out);
}

}  // namespace muster::daemon
