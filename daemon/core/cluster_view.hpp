// What the core's reports (reports.hpp) read of the multi-node side, which
// the core never includes: MultiNode (cluster/multi_node.hpp) implements it.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "core/waits.hpp"
#include "jobs/job.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/messages.hpp"

namespace muster::daemon {

class ClusterView {
 public:
  // A rendezvous of this node still forming: who joined, as the
  // coordinator last said.
  virtual proto::JobEvent cluster_state(const std::string& job) const = 0;
  // This node's part of a multi-node job: the barriers and key waits its
  // ranks (and its subtree) relay upstream.
  virtual std::vector<proto::WaitStatus> relayed_waits(const Job& job,
                                                       Clock::time_point now) const = 0;
  // A job coordinated here: its waits across its nodes, from their
  // heartbeats (empty while its round forms).
  virtual std::vector<proto::WaitStatus> coordinated_waits(const std::string& job) const = 0;
  // The relayed waits in numbers: parked, stuck now, logged as stuck.
  virtual WaitCounts relayed_counts(Clock::time_point now) const = 0;
  // The global store of a job coordinated here, if any.
  virtual Job* global_store(const std::string& id) = 0;
  // How many jobs are coordinated here, and each one's global store.
  virtual size_t coordinated_count() const = 0;
  virtual void each_global_store(const std::function<void(const Job&)>& f) const = 0;
  virtual void set_stuck_after(std::chrono::milliseconds after) = 0;

 protected:
  ~ClusterView() = default;
};

}  // namespace muster::daemon
