// The daemon's state as the metrics show it (metrics/sample.hpp): counted
// on the loop's thread, into plain values that the HTTP thread may read.
#include "core/state.hpp"
#include "job_id.hpp"

namespace muster::daemon {

void State::fill_metrics(metrics::Sample& s, Clock::time_point now) const {
  s.uptime_s = std::chrono::duration<double>(now - started_).count();
  // Labels say a job by its name and its owner apart (common/job_id.hpp).
  auto owner_of = [](int64_t uid) { return uid < 0 ? std::string() : std::to_string(uid); };
  for (const auto& d : jobs_.devices().slots())
    s.gpus.push_back({d.device.index, d.device.uuid, std::string(job_name(d.job)),
                      d.job.empty() ? "" : owner_of(jobs_.get(d.job).owner_uid),
                      !d.quarantined().empty(), !d.drain.empty()});
  for (const auto& [id, job] : jobs_) {
    metrics::JobSample j;
    j.id = job_name(id);
    j.owner = owner_of(job.owner_uid);
    j.generation = job.generation;
    j.world_size = job.world_size();
    for (const auto& slot : job.slots) {
      auto i = static_cast<size_t>(slot.state);
      if (i < metrics::kSlotStates) ++j.ranks[i];
    }
    j.parked_waits = job.key_waiters.size();
    for (const auto& [name, b] : job.barriers) j.parked_waits += b.waiters.size();
    for (const auto& w : open_waits(id))
      if (w.stuck) ++j.stuck_waits;
    j.store_bytes = job.kv.bytes();
    j.store_keys = job.kv.size();
    s.jobs.push_back(std::move(j));
  }
  s.stuck_detected = wait_counts().stuck_detected;
}

}  // namespace muster::daemon
