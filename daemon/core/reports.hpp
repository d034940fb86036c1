// What the daemon says of itself: status replies (bounded, filtered by who
// asks), the service manager's summary line, the metrics' sample, and the
// stuck-wait report. Read from the jobs, the store and the multi-node side
// (through ClusterSide); it changes nothing but the stuck waits' "logged"
// marks and its own counters.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster_side.hpp"
#include "core/job_table.hpp"
#include "core/store.hpp"
#include "core/waits.hpp"
#include "metrics/sample.hpp"
#include "protocol/messages.hpp"

namespace muster::daemon {

class Reports {
 public:
  // peer_requests: the count of requests that came on the peer socket,
  // kept by State as it handles them.
  Reports(JobTable& jobs, Store& store, ClusterSide& cluster, const uint64_t& peer_requests)
      : jobs_(jobs), store_(store), cluster_(cluster), peer_requests_(peer_requests) {}

  // What `viewer` (a uid) may see: root and in-process callers (-1) see
  // everything; anyone else sees their own jobs, and other uids' GPUs only
  // as in use. only: that job alone (unknown_job when the viewer has none
  // of that name).
  proto::StatusReply status(int64_t viewer = -1, const std::string& only = "") const;
  // The service manager's STATUS= line: jobs, GPU leases and live ranks.
  std::string summary() const;
  // What the metrics show of the GPUs, jobs and waits (metrics/sample.hpp);
  // the peers' part is MultiNode's.
  void fill_metrics(metrics::Sample& s, Clock::time_point now) const;

  // Which rank is stuck where (waits.hpp): the open barriers and key waits
  // of one job (empty for an unknown one), oldest first, and the counts of
  // parked and stuck waits. A wait parked longer than stuck_after is logged
  // once with its missing ranks, and counted in stuck_detected.
  std::vector<proto::WaitStatus> open_waits(const std::string& job) const;
  WaitCounts wait_counts() const;
  void set_stuck_after(std::chrono::milliseconds after);
  // Logs, once each, the waits that became stuck by `now`.
  void report_stuck(Clock::time_point now);

  // How jobs are contained here (contain/job_cgroups.hpp), and where the
  // GPUs come from (gpu::Inventory::source), for status.
  void set_containment(std::string how) { containment_ = std::move(how); }
  void set_gpu_source(std::string source) { gpu_source_ = std::move(source); }

 private:
  // status()'s jobs, within the reply's bound.
  void status_jobs(proto::StatusReply& s, int64_t viewer, const std::string& only,
                   Clock::time_point now) const;

  JobTable& jobs_;
  Store& store_;
  ClusterSide& cluster_;
  const uint64_t& peer_requests_;
  const Clock::time_point started_ = Clock::now();
  uint64_t stuck_detected_ = 0;  // the store's stuck waits logged (wait_counts)
  std::string containment_;
  std::string gpu_source_;
};

}  // namespace muster::daemon
