// The multi-node side of a daemon: the node's links to coordinators and its
// relays (NodeLinks), and the Coordinator of the jobs coordinated here.
// State holds one behind a pointer, so that the core never sees these
// types; the server reaches it through State::cluster() for what is the
// cluster's alone: its configuration, the frames and reconnects of the
// links, the ticks, the rounds the state file saves, the peers' metrics.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cluster/cluster.hpp"
#include "cluster/coordinator.hpp"
#include "cluster/node_links.hpp"
#include "core/cluster_side.hpp"
#include "metrics/sample.hpp"
#include "protocol/envelope.hpp"
#include "protocol/messages.hpp"

namespace muster::daemon {

class MultiNode final : public ClusterSide {
 public:
  // A node's status reply for `viewer`, of job `job` (State::status): the
  // answers to a status that waited on its coordinator's job-wide waits.
  using StatusOf = std::function<proto::StatusReply(int64_t viewer, const std::string& job)>;
  MultiNode(Store& store, JobTable& jobs, StatusOf status);

  // This daemon's name among its peers and how long a silent peer may stay
  // silent; `unavailable` says why this daemon cannot peer (no keys, say),
  // empty when it can; tree_width: children per daemon in the relay tree
  // of the jobs coordinated here (0 = a flat star).
  void configure(std::string node_id, std::chrono::milliseconds peer_timeout,
                 std::string unavailable, uint32_t tree_width);
  // What this node is called in other nodes' rendezvous progress.
  void set_node_name(std::string name) { node.set_name(std::move(name)); }
  // How many coordinators (links, each three ZeroMQ sockets and a
  // connection) all jobs together may name (one uid's: NodeLinks).
  void set_link_cap(size_t total) { node.set_link_caps(NodeLinks::kLinksPerUid, total); }
  // host:port of our peer listener, told to coordinators for the tree.
  void set_peer_endpoint(std::string endpoint) { node.set_peer_endpoint(std::move(endpoint)); }

  bool has_link(const std::string& link) const { return node.has_link(link); }
  // The connection to a coordinator was made again: requests in flight go again.
  void link_reconnected(const std::string& link, std::vector<Outgoing>& out) {
    node.resend(link, out);
  }
  // A frame from the coordinator at `link` (the answer to something sent);
  // `held` keeps data alive, for a reply that passes it on as it is.
  void on_link_frame(const std::string& link, void* data, size_t size, std::vector<Outgoing>& out,
                     std::shared_ptr<void> held = {});
  // Heartbeats, lost peers, last calls and rendezvous timeouts.
  void tick(Clock::time_point now, std::vector<Outgoing>& out);
  // True while any multi-node work needs tick() called soon.
  bool active() const { return !coordinator.empty() || node.active(); }
  // What the reports read (core/cluster_side.hpp).
  proto::JobEvent cluster_state(const std::string& job) const override {
    return node.cluster_state(job);
  }
  std::vector<proto::WaitStatus> relayed_waits(const Job& job,
                                               Clock::time_point now) const override {
    return node.relays().waits(job, now);
  }
  std::vector<proto::WaitStatus> coordinated_waits(const std::string& job) const override {
    return coordinator.job_waits_of(job);
  }
  WaitCounts relayed_counts(Clock::time_point now) const override;
  Job* global_store(const std::string& id) override { return coordinator.global_store(id); }
  size_t coordinated_count() const override { return coordinator.size(); }
  void each_global_store(const std::function<void(const Job&)>& f) const override {
    for (const auto& [id, cj] : coordinator.rounds()) f(cj.store);
  }
  void set_stuck_after(std::chrono::milliseconds after) override {
    node.relays().set_stuck_after(after);
  }
  void keep_link(const std::string& coordinator) override { node.keep(coordinator); }
  void rendezvous(const ReplyTo& to, const proto::Envelope& env,
                  std::vector<Outgoing>& out) override {
    node.rendezvous(to, env, out);
  }
  bool ask_job_waits(const ReplyTo& to, const Job& job, std::vector<Outgoing>& out) override {
    return node.ask_job_waits(to, job, out);
  }
  void slot_ended(Job& job, uint32_t local_rank, const char* why,
                  std::vector<Outgoing>& out) override {
    node.slot_ended(job, local_rank, why, out);
  }
  void job_removed(Job& job, std::vector<Outgoing>& out) override { node.job_removed(job, out); }

  // The rounds of the multi-node jobs coordinated here, saved with the jobs
  // (persist/round_codec.hpp), and one put back after a restart.
  const std::map<std::string, CoordJob>& rounds() const { return coordinator.rounds(); }
  void restore_round(const std::string& job, CoordJob cj) {
    coordinator.restore(job, std::move(cj));
  }
  // True once after a coordinator change that no reply acknowledges but
  // that must be saved before the round's replies go out.
  bool take_save_wanted() { return coordinator.take_save_wanted(); }
  // The peer daemons in the metrics: a node daemon reports to its jobs'
  // coordinators; a coordinator hears its nodes.
  void metrics(metrics::Sample& s, Clock::time_point now) const;

  NodeLinks node;           // this daemon's part in jobs coordinated elsewhere
  Coordinator coordinator;  // the jobs coordinated here

 private:
  // The status replies whose job-wide waits came (or could not come).
  void answer_job_waits(std::vector<Outgoing>& out);

  StatusOf status_;
  uint64_t stuck_detected_ = 0;
};

}  // namespace muster::daemon
