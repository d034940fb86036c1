// The muster_* families (doc/operating.md, "Metrics", lists them with what they mean).
#include <string>

#include "metrics/process.hpp"
#include "metrics/sample.hpp"
#include "muster/error.hpp"
#include "protocol/message_table.hpp"

namespace muster::daemon::metrics {

namespace {

using Type = TextWriter::Type;
constexpr const char* kSlotNames[kSlotStates] = {"free", "reserved", "running", "joined", "exited"};

// A job's label is job_id, not job: Prometheus gives every series the `job`
// label of its scrape config, and would rename ours exported_job.

void gpus(TextWriter& w, const Sample& s) {
  w.family("muster_gpu_leased", Type::kGauge,
           "1 while the GPU is leased to a rank of the job in label job_id, else 0");
  for (const auto& g : s.gpus) {
    std::string i = std::to_string(g.index);
    w.sample("muster_gpu_leased",
             {{"gpu", i}, {"uuid", g.uuid}, {"job_id", g.job}, {"owner", g.owner}},
             g.job.empty() ? 0 : 1);
  }
  w.family("muster_gpu_quarantined", Type::kGauge,
           "1 while the GPU is quarantined (failed health at discovery or a critical XID)");
  for (const auto& g : s.gpus)
    w.sample("muster_gpu_quarantined", {{"gpu", std::to_string(g.index)}, {"uuid", g.uuid}},
             g.quarantined ? 1 : 0);
  w.family("muster_gpu_drained", Type::kGauge, "1 while the GPU is drained (muster gpu drain)");
  for (const auto& g : s.gpus)
    w.sample("muster_gpu_drained", {{"gpu", std::to_string(g.index)}, {"uuid", g.uuid}},
             g.drained ? 1 : 0);
}

void jobs(TextWriter& w, const Sample& s) {
  w.family("muster_jobs", Type::kGauge, "jobs this daemon knows");
  w.sample("muster_jobs", {}, static_cast<double>(s.jobs.size()));
  w.family("muster_job_ranks", Type::kGauge, "the job's local ranks by state");
  for (const auto& j : s.jobs)
    for (size_t i = 0; i < kSlotStates; ++i)
      w.sample("muster_job_ranks", {{"job_id", j.id}, {"owner", j.owner}, {"state", kSlotNames[i]}},
               j.ranks[i]);
  w.family("muster_job_world_size", Type::kGauge, "the job's world size (all nodes)");
  for (const auto& j : s.jobs)
    w.sample("muster_job_world_size", {{"job_id", j.id}, {"owner", j.owner}}, j.world_size);
  w.family("muster_job_generation", Type::kGauge,
           "the job's generation: muster run's restart count (TORCHELASTIC_RESTART_COUNT)");
  for (const auto& j : s.jobs)
    w.sample("muster_job_generation", {{"job_id", j.id}, {"owner", j.owner}},
             static_cast<double>(j.generation));
  w.family("muster_job_restarts_total", Type::kCounter,
           "generation changes of jobs seen since this daemon started");
  w.sample("muster_job_restarts_total", {}, static_cast<double>(s.restarts));
  w.family("muster_stuck_waits_detected_total", Type::kCounter,
           "waits found older than --stuck-after (each logged once) since the daemon started");
  w.sample("muster_stuck_waits_detected_total", {}, static_cast<double>(s.stuck_detected));
  w.family("muster_parked_waits", Type::kGauge,
           "requests parked in the job: store gets and waits, barrier arrivals");
  for (const auto& j : s.jobs)
    w.sample("muster_parked_waits", {{"job_id", j.id}, {"owner", j.owner}},
             static_cast<double>(j.parked_waits));
  w.family("muster_stuck_waits", Type::kGauge,
           "open barriers and key waits of the job older than --stuck-after");
  for (const auto& j : s.jobs)
    w.sample("muster_stuck_waits", {{"job_id", j.id}, {"owner", j.owner}},
             static_cast<double>(j.stuck_waits));
  w.family("muster_store_bytes", Type::kGauge, "bytes of keys and values in the job's store");
  for (const auto& j : s.jobs)
    w.sample("muster_store_bytes", {{"job_id", j.id}, {"owner", j.owner}},
             static_cast<double>(j.store_bytes));
  w.family("muster_store_keys", Type::kGauge, "keys in the job's store");
  for (const auto& j : s.jobs)
    w.sample("muster_store_keys", {{"job_id", j.id}, {"owner", j.owner}},
             static_cast<double>(j.store_keys));
}

void requests(TextWriter& w, const RequestStats& r) {
  w.family("muster_requests_total", Type::kCounter,
           "requests received (local and from peer daemons), by message type");
  for (const auto& t : proto::message_table())
    if (t.sender != proto::Sender::kNone)
      w.sample("muster_requests_total", {{"type", t.name}},
               static_cast<double>(r.requests[static_cast<size_t>(t.type)]));
  w.family("muster_error_replies_total", Type::kCounter, "error replies sent, by error code");
  for (size_t c = 1; c <= static_cast<size_t>(ErrorCode::kRepliesDropped); ++c)
    w.sample("muster_error_replies_total", {{"code", error_name(static_cast<ErrorCode>(c))}},
             static_cast<double>(r.errors[c]));
  w.family("muster_request_duration_seconds", Type::kHistogram,
           "time the daemon's loop spent handling a request, by message type (a parked wait "
           "counts its handling, not its wait)");
  for (const auto& t : proto::message_table()) {
    const auto& h = r.latency[static_cast<size_t>(t.type)];
    if (t.sender == proto::Sender::kNone || h.count == 0) continue;
    Label l{"type", t.name};
    w.histogram("muster_request_duration_seconds", {&l, 1}, RequestStats::kLatencyBounds, h);
  }
}

void peers(TextWriter& w, const Sample& s) {
  w.family("muster_peer_links", Type::kGauge,
           "daemons this one exchanges heartbeats with, by role (coordinator: one we report "
           "to; node: one that reports to us)");
  for (const char* role : {"coordinator", "node"}) {
    size_t n = 0;
    for (const auto& p : s.peers) n += p.role == role;
    w.sample("muster_peer_links", {{"role", role}}, static_cast<double>(n));
  }
  w.family("muster_peer_heartbeat_age_seconds", Type::kGauge,
           "seconds since the peer was last heard");
  for (const auto& p : s.peers)
    w.sample("muster_peer_heartbeat_age_seconds", {{"peer", p.peer}, {"role", p.role}},
             p.heartbeat_age_s);
  w.family("muster_peer_lost", Type::kGauge,
           "1 when the coordinator went silent past --peer-timeout (a silent node breaks its "
           "job's generation instead, and is dropped)");
  for (const auto& p : s.peers)
    if (p.role == "coordinator")
      w.sample("muster_peer_lost", {{"peer", p.peer}, {"role", p.role}}, p.lost ? 1 : 0);
}

void saves(TextWriter& w, const SaveStats& v) {
  w.family("muster_state_save_duration_seconds", Type::kHistogram,
           "time to make a round's changes durable in the state directory");
  w.histogram("muster_state_save_duration_seconds", {}, SaveStats::kLatencyBounds, v.latency);
  w.family("muster_state_save_failures_total", Type::kCounter,
           "saves of the state that failed (replies that acknowledge changes wait)");
  w.sample("muster_state_save_failures_total", {}, static_cast<double>(v.failures));
  w.family("muster_state_changes_refused_total", Type::kCounter,
           "changes refused with storage_failed before they were made: no room to save them");
  w.sample("muster_state_changes_refused_total", {}, static_cast<double>(v.refused));
}

}  // namespace

std::string render(const Sample& s, const RequestStats& r, const SaveStats& v) {
  TextWriter w;
  w.family("muster_uptime_seconds", Type::kGauge, "seconds since this musterd started");
  w.sample("muster_uptime_seconds", {}, s.uptime_s);
  process_families(w);
  gpus(w, s);
  jobs(w, s);
  requests(w, r);
  peers(w, s);
  saves(w, v);
  w.family("muster_replies_dropped_total", Type::kCounter,
           "replies dropped for local clients that read none (--reply-queue)");
  w.sample("muster_replies_dropped_total", {}, static_cast<double>(s.replies_dropped));
  return w.take();
}

}  // namespace muster::daemon::metrics
