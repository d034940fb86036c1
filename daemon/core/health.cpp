// A GPU that fails while the daemon runs: NVML's XID events (a watcher
// thread in the server waits for them). A critical XID quarantines the GPU
// (saved with the state: across restarts too, until root undrains it, which
// says it was reset), and the job that holds it is told: its
// ranks' waits fail with device_failed, naming the GPU, now and from then
// on (a rank that has not noticed yet learns at its next barrier or get).
#include <algorithm>
#include <array>

#include "core/out_answers.hpp"
#include "core/state.hpp"
#include "log.hpp"

namespace muster::daemon {

namespace {
// XIDs after which a GPU cannot be trusted until it is reset: 48 (double-
// bit ECC), 63/64 (page retirement or row remap event / failure), 74
// (NVLink error), 79 (fallen off the bus), 92 (high single-bit ECC rate),
// 94/95 (contained / uncontained ECC error). NVIDIA's XID catalog.
constexpr std::array<uint64_t, 8> kCritical{48, 63, 64, 74, 79, 92, 94, 95};
}  // namespace

void State::on_xid(uint32_t index, uint64_t xid, std::vector<Outgoing>& out) {
  if (std::find(kCritical.begin(), kCritical.end(), xid) == kCritical.end()) {
    log::notice(log::gpu(index), "GPU " + std::to_string(index) + ": XID " + std::to_string(xid) +
                                     " (not one that quarantines a GPU)");
    return;
  }
  auto* slot = jobs_.devices().quarantine(index, "critical XID " + std::to_string(xid));
  if (!slot) return;
  std::string gpu = "GPU " + std::to_string(index) +
                    (slot->device.uuid.empty() ? "" : " (" + slot->device.uuid + ")");
  log::warning(log::gpu(index, slot->job),
               gpu + " quarantined: critical XID " + std::to_string(xid));
  if (slot->job.empty()) return;
  Job* job = jobs_.find(slot->job);
  if (!job) return;
  job->device_failure = gpu + ", leased to local rank " + std::to_string(slot->local_rank) +
                        " of job '" + job->id + "', failed: critical XID " + std::to_string(xid) +
                        "; the job cannot continue on it";
  OutAnswers a(out);
  store_.fail_all(*job, ErrorCode::kDeviceFailed, job->device_failure, a);
}

void State::gpu_drain(const ReplyTo& to, const proto::GpuDrain& m, std::vector<Outgoing>& out) {
  const DeviceSlot& s = jobs_.devices().set_drain(m.device, m.drain ? m.reason : "");
  std::string by = to.peer_uid >= 0 ? " by uid " + std::to_string(to.peer_uid) : "";
  if (m.drain)
    log::notice(log::gpu(m.device, s.job),
                "GPU " + std::to_string(m.device) + " drained" + by + ": " + m.reason +
                    (s.job.empty() ? "" : " (job '" + s.job + "' keeps it until its rank ends)"));
  else
    log::notice(log::gpu(m.device), "GPU " + std::to_string(m.device) + " undrained" + by);
  reply(to, proto::Ok{}, out);
}

}  // namespace muster::daemon
