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

// A gauge with one sample for each GPU: 1 while its member `flag` is set.
void per_gpu(TextWriter& w, const Sample& s, std::string_view name, std::string_view help,
             bool GpuSample::*flag) {
  w.family(name, Type::kGauge, help);
  for (const auto& g : s.gpus)
    w.sample(name, {{"gpu", std::to_string(g.index)}, {"uuid", g.uuid}}, g.*flag ? 1 : 0);
}

void gpus(TextWriter& w, const Sample& s) {
  w.family("muster_gpu_leased", Type::kGauge,
           "1 while the GPU is leased to a rank of the job in label job_id, else 0");
  for (const auto& g : s.gpus) {
    std::string i = std::to_string(g.index);
    w.sample("muster_gpu_leased",
             {{"gpu", i}, {"uuid", g.uuid}, {"job_id", g.job}, {"owner", g.owner}},
             g.job.empty() ? 0 : 1);
  }
  per_gpu(w, s, "muster_gpu_quarantined",
          "1 while the GPU is quarantined (failed health at discovery or a critical XID)",
          &GpuSample::quarantined);
  per_gpu(w, s, "muster_gpu_drained", "1 while the GPU is drained (muster gpu drain)",
          &GpuSample::drained);
}

// A gauge with one sample for each job: its member `field`.
template <class T>
void per_job(TextWriter& w, const Sample& s, std::string_view name, std::string_view help,
             T JobSample::*field) {
  w.family(name, Type::kGauge, help);
  for (const auto& j : s.jobs)
    w.sample(name, {{"job_id", j.id}, {"owner", j.owner}}, static_cast<double>(j.*field));
}

void jobs(TextWriter& w, const Sample& s) {
  w.single("muster_jobs", Type::kGauge, "jobs this daemon knows",
           static_cast<double>(s.jobs.size()));
  w.family("muster_job_ranks", Type::kGauge, "the job's local ranks by state");
  for (const auto& j : s.jobs)
    for (size_t i = 0; i < kSlotStates; ++i)
      w.sample("muster_job_ranks", {{"job_id", j.id}, {"owner", j.owner}, {"state", kSlotNames[i]}},
               j.ranks[i]);
  per_job(w, s, "muster_job_world_size", "the job's world size (all nodes)",
          &JobSample::world_size);
  per_job(w, s, "muster_job_generation",
          "the job's generation: muster run's restart count (TORCHELASTIC_RESTART_COUNT)",
          &JobSample::generation);
  w.single("muster_job_restarts_total", Type::kCounter,
           "generation changes of jobs seen since this daemon started",
           static_cast<double>(s.restarts));
  w.single("muster_stuck_waits_detected_total", Type::kCounter,
           "waits found older than --stuck-after (each logged once) since the daemon started",
           static_cast<double>(s.stuck_detected));
  per_job(w, s, "muster_parked_waits",
          "requests parked in the job: store gets and waits, barrier arrivals",
          &JobSample::parked_waits);
  per_job(w, s, "muster_stuck_waits",
          "open barriers and key waits of the job older than --stuck-after",
          &JobSample::stuck_waits);
  per_job(w, s, "muster_store_bytes", "bytes of keys and values in the job's store",
          &JobSample::store_bytes);
  per_job(w, s, "muster_store_keys", "keys in the job's store", &JobSample::store_keys);
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
  w.single("muster_state_save_failures_total", Type::kCounter,
           "saves of the state that failed (replies that acknowledge changes wait)",
           static_cast<double>(v.failures));
  w.single("muster_state_changes_refused_total", Type::kCounter,
           "changes refused with storage_failed before they were made: no room to save them",
           static_cast<double>(v.refused));
}

}  // namespace

std::string render(const Sample& s, const RequestStats& r, const SaveStats& v) {
  TextWriter w;
  w.single("muster_uptime_seconds", Type::kGauge, "seconds since this musterd started", s.uptime_s);
  process_families(w);
  gpus(w, s);
  jobs(w, s);
  requests(w, r);
  peers(w, s);
  saves(w, v);
  w.single("muster_replies_dropped_total", Type::kCounter,
           "replies dropped for local clients that read none (--reply-queue)",
           static_cast<double>(s.replies_dropped));
  return w.take();
}

}  // namespace muster::daemon::metrics
