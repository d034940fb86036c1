// What the core reads and asks of the multi-node side, which it never
// includes: MultiNode (cluster/multi_node.hpp) implements it. The reports
// and the holdings read it; State tells it of slots and jobs that end.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "core/reply.hpp"
#include "core/waits.hpp"
#include "jobs/job.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"
#include "protocol/messages.hpp"

namespace muster::daemon {

class ClusterSide {
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

  // A node's part of a multi-node job keeps a link to its coordinator (a
  // job restored after a restart heartbeats again).
  virtual void keep_link(const std::string& coordinator) = 0;
  // The rendezvous request of a rank of this node, sent on to the job's
  // coordinator (NodeLinks).
  virtual void rendezvous(const ReplyTo& to, const proto::Envelope& env,
                          std::vector<Outgoing>& out) = 0;
  // A status asked of a formed job that spans nodes: true when its
  // job-wide waits were asked of its coordinator (the reply goes when they
  // come), false when the node's own view must do.
  virtual bool ask_job_waits(const ReplyTo& to, const Job& job, std::vector<Outgoing>& out) = 0;
  // A slot of a node's part of a multi-node job ended, and the job ended:
  // the coordinator is told.
  virtual void slot_ended(Job& job, uint32_t local_rank, const char* why,
                          std::vector<Outgoing>& out) = 0;
  virtual void job_removed(Job& job, std::vector<Outgoing>& out) = 0;

 protected:
  ~ClusterSide() = default;
};

}  // namespace muster::daemon
