// The daemon's state as the server sees it, free of sockets: the server
// feeds it decoded requests and pid exits, and sends what it returns. State
// checks each request (Access), routes it (route_away) and runs its row of
// the dispatcher's column (dispatch.cpp). It owns the parts the rows call:
//   - the jobs, their slots and the GPU leases (JobTable),
//   - the waits on keys and barriers (Store) and the store requests
//     (StoreRequests), what everyone holds (HoldingsCount),
//   - the samplers' shards and progress (Samplers), failing GPUs
//     (GpuHealth), what the daemon says of itself (Reports),
//   - behind a pointer, the multi-node side (MultiNode, cluster/): the
//     node's links and relays and the Coordinator of the jobs coordinated
//     here, which the core reads through ClusterSide.
// Every handler validates before it mutates, so a refused request changes
// nothing.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/access.hpp"
#include "core/gpu_health.hpp"
#include "core/holdings_count.hpp"
#include "core/job_scope.hpp"
#include "core/job_table.hpp"
#include "core/quotas.hpp"
#include "core/reply.hpp"
#include "core/reports.hpp"
#include "core/request.hpp"
#include "core/samplers.hpp"
#include "core/store.hpp"
#include "core/store_requests.hpp"
#include "core/waits.hpp"
#include "gpu/inventory.hpp"
#include "jobs/job.hpp"
#include "liveness/pidwatch.hpp"
#include "metrics/sample.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"
#include "protocol/message_table.hpp"
#include "protocol/sampler_messages.hpp"

namespace muster::daemon {

// The multi-node side (cluster/): core code holds it only by pointer.
class MultiNode;
struct CoordJob;

class State {
 public:
  State(std::vector<gpu::Device> allowed_devices, PidWatch& watch);
  ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  // Handles one decoded request; replies now (or later, for waits) go to out.
  void handle(const ReplyTo& to, const proto::Envelope& env, std::vector<Outgoing>& out);
  // What is wrong with the dispatcher's column (dispatch.cpp): a request
  // type of the message table without a handler, a type with two, a handler
  // for a type that is no request. Empty when every request has its one
  // handler; the constructor refuses to run otherwise.
  static std::vector<std::string> handler_gaps();
  // A watched pid ended.
  void on_pid_exit(int64_t pid, std::vector<Outgoing>& out);
  // Fails waits whose deadline passed.
  void expire(Clock::time_point now, std::vector<Outgoing>& out);
  std::optional<Clock::time_point> next_deadline() const;
  // GPUs that fail while the daemon runs (NVML's XIDs, lost GPUs):
  // gpu_health.hpp.
  GpuHealth& gpu_health() { return gpus_; }
  // Fails every pending wait (daemon shutting down).
  void cancel_all(std::vector<Outgoing>& out);
  // The samplers' shards and progress (samplers.hpp): the server sets
  // their Permuter and says when it finished; the state file saves and
  // restores their progress.
  Samplers& samplers() { return samplers_; }
  const Samplers& samplers() const { return samplers_; }
  // Forgets the gets and waits parked for one local client, unanswered
  // (Store::forget_client); returns their request ids.
  std::vector<uint64_t> forget_client_waits(const std::string& routing_id);

  // Status, the summary line, metrics and the stuck-wait report
  // (reports.hpp).
  Reports& reports() { return reports_; }
  const Reports& reports() const { return reports_; }
  size_t job_count() const;
  // Who else runs on the GPUs (--foreign-gpu-use); see GpuUse.
  void set_gpu_use(GpuUse use) { jobs_.set_gpu_use(std::move(use)); }
  // Who may do what (access.hpp); the server sets slurm-gpus = verified's
  // check there.
  Access& access() { return access_; }

  // The per-job and per-uid quotas (quotas.hpp); they apply to requests
  // from now on, never to what restore() brings back.
  void set_quotas(const Quotas& q) {
    quotas_ = q;
    jobs_.set_jobs_per_uid(q.jobs_per_uid);
  }
  const Quotas& quotas() const { return quotas_; }
  // What everyone holds, for the ceilings and fair shares
  // (holdings_count.hpp).
  const HoldingsCount& holdings() const { return holdings_; }

  // The multi-node side (cluster/multi_node.hpp): the server reaches it
  // here for its configuration, its links' frames and reconnects, its
  // ticks, its rounds and its peers' metrics.
  MultiNode& cluster() { return *cluster_; }
  const MultiNode& cluster() const { return *cluster_; }
  // Requests that arrived on the peer socket (the benchmark counts them).
  uint64_t peer_requests() const { return peer_requests_; }
  // Handles the requests in `out` to the coordinator in this daemon, and
  // passes its answers to them on (cluster/peer_requests.cpp).
  void loop_back(std::vector<Outgoing>& out);

  // Restarts (the state file): what survives one, and putting it back into
  // a fresh State before anyone is served.
  const std::map<std::string, Job>& jobs() const { return jobs_.all(); }
  const DeviceLeases& devices() const { return jobs_.devices(); }
  // The pid watch this State was made with: a restored slot's pid is
  // watched again, one reference per slot.
  PidWatch& pid_watch() { return watch_; }
  // Takes a job back as it was saved: its slots' devices leased again (a
  // device this daemon no longer hands out stays with its rank), and, for a
  // node's part of a multi-node job, heartbeats to its coordinator again.
  void restore(Job job);
  // Drains and failures as the state file saved them (DeviceLeases::restore).
  void restore_device_marks(const std::vector<DeviceMark>& marks) {
    jobs_.devices().restore(marks);
  }

 private:
  // Runs the request's handler, its row in the dispatcher's column (after
  // admit, scope_job and authorize; dispatch.cpp).
  void dispatch(const Request& r);
  // The column's rows: the node's own requests (core/dispatch.cpp), and
  // what spans nodes (cluster/peer_requests.cpp).
  static std::span<const Handler> local_handlers();
  static std::span<const Handler> peer_handlers();

  void leave(const proto::Leave& m, std::vector<Outgoing>& out);

  // The job a store or barrier request works on: the local one, or for a
  // request from a peer, the coordinator's global store of that job.
  Job& store_job(const ReplyTo& to, const std::string& id);
  Job* find_store_job(const ReplyTo& to, const std::string& id);

  // A forwardable request, sent where route() (cluster/route.hpp) says
  // when its job spans nodes (true); false when it is served here
  // (cluster/peer_requests.cpp).
  bool route_away(const Request& r);
  // A broadcast request of a job coordinated here too, served at once
  // (peer_requests.cpp).
  void bcast_here(const Request& r, const Job& job);

  // A Forward from a peer daemon (cluster/peer_requests.cpp): its inner
  // request, dispatched for the one job the Forward was checked for.
  void forward_in(const ReplyTo& to, const proto::Forward& m, std::vector<Outgoing>& out);

  void slot_ended(Job& job, uint32_t local_rank, const char* why, std::vector<Outgoing>& out);
  void maybe_remove(const std::string& id, std::vector<Outgoing>& out);

  // The parts, in the order they are made: the multi-node side reads the
  // jobs and the store; the holdings and reports read it in turn.
  JobTable jobs_;  // the jobs, their slots and GPU leases
  PidWatch& watch_;
  Quotas quotas_;
  Store store_;  // the waits on keys and barriers
  MultiNode* new_multi_node();
  struct MultiNodeDelete {
    void operator()(MultiNode* t) const;
  };
  std::unique_ptr<MultiNode, MultiNodeDelete> cluster_;
  // The multi-node side as the core reads it (peer_requests.cpp: the core cannot
  // convert a MultiNode it sees only declared).
  ClusterSide& cluster_side();
  HoldingsCount holdings_{jobs_, store_, cluster_side()};
  StoreRequests stores_;              // the store and barrier requests (store_requests.hpp)
  GpuHealth gpus_{jobs_, store_};     // failing and drained GPUs (gpu_health.hpp)
  Samplers samplers_{jobs_, watch_};  // shards and their progress (samplers.hpp)
  std::string forwarding_job_;        // the job a Forward being handled may touch
  uint64_t peer_requests_ = 0;
  Reports reports_{jobs_, store_, cluster_side(), peer_requests_};
  // The uid besides root that may send what only root may: the one the
  // daemon runs as.
  Access access_{jobs_, ::geteuid()};
};

}  // namespace muster::daemon
