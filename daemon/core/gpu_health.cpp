// GpuHealth (gpu_health.hpp). A critical XID or a lost GPU quarantines the
// GPU (saved with the state: across restarts too, until root undrains it,
// which says it was reset), and the job that holds it is told: its ranks'
// waits fail with device_failed, naming the GPU, now and from then on (a
// rank that has not noticed yet learns at its next barrier or get).
#include <algorithm>
#include <array>

#include "core/gpu_health.hpp"

#include "core/out_answers.hpp"
#include "log.hpp"

namespace muster::daemon {

namespace {

// What an XID means for a job and its GPU, after NVIDIA's XID catalogue
// (docs.nvidia.com/deploy/xid-errors, "Xid Error Listing" and the
// recommended actions beside each):
//  - failures: the GPU cannot be trusted until it is reset, so it is
//    quarantined and the job that holds it fails. 48 (double-bit ECC),
//    64 (page retirement / row remap recording failure), 74 (NVLink
//    error), 79 (fallen off the bus), 95 (uncontained ECC error), 119 and
//    120 (GSP RPC timeout, GSP error: the GPU's firmware stopped
//    answering), 154 (the driver's recovery action changed: it now asks
//    for a reset, a reboot or a drain).
//  - contained: 94, an ECC error the driver contained to the processes
//    that touched the memory: the job on the GPU fails, the GPU stays in
//    service (its row remap and recovery action, re-read right after the
//    XID, quarantine it if they ask for a reset).
//  - anything else is informational for muster: 63 (a page retirement or
//    row remap was recorded: the remap itself worked), 92 (a high rate of
//    corrected single-bit errors), 13/31/43/45 (one application's fault or
//    its end). Logged; the health re-read decides, not the number.
enum class XidClass { kInfo, kContained, kFailure };
XidClass classify(uint64_t xid) {
  constexpr std::array<uint64_t, 8> kFailure{48, 64, 74, 79, 95, 119, 120, 154};
  if (std::find(kFailure.begin(), kFailure.end(), xid) != kFailure.end()) return XidClass::kFailure;
  return xid == 94 ? XidClass::kContained : XidClass::kInfo;
}

}  // namespace

void GpuHealth::on_xid(uint32_t index, uint64_t xid, std::vector<Outgoing>& out,
                       const std::string& health) {
  XidClass c = classify(xid);
  std::string what = (c == XidClass::kFailure ? "critical XID " : "XID ") + std::to_string(xid);
  if (!health.empty()) {
    fail(index, what + "; " + health, true, out);
  } else if (c == XidClass::kInfo) {
    log::notice(log::gpu(index), "GPU " + std::to_string(index) + ": " + what +
                                     " (not one that fails a job or quarantines a GPU)");
  } else {
    fail(index, what, c == XidClass::kFailure, out);
  }
}

void GpuHealth::on_gpu_lost(uint32_t index, const std::string& why, std::vector<Outgoing>& out) {
  fail(index, why, true, out);
}

void GpuHealth::fail(uint32_t index, const std::string& why, bool quarantine,
                     std::vector<Outgoing>& out) {
  const DeviceSlot* slot = nullptr;
  for (const auto& s : jobs_.devices().slots())
    if (s.device.index == index) slot = &s;
  if (quarantine) slot = jobs_.devices().quarantine(index, why);
  if (!slot) return;
  std::string gpu = "GPU " + std::to_string(index) +
                    (slot->device.uuid.empty() ? "" : " (" + slot->device.uuid + ")");
  log::warning(log::gpu(index, slot->job), gpu + (quarantine ? " quarantined: " : ": ") + why +
                                               (quarantine ? "" : " (the GPU stays in service)"));
  if (slot->job.empty()) return;
  Job* job = jobs_.find(slot->job);
  if (!job) return;
  job->device_failure = gpu + ", leased to local rank " + std::to_string(slot->local_rank) +
                        " of job '" + job->id + "', failed: " + why +
                        "; the job cannot continue on it";
  OutAnswers a(out);
  store_.fail_all(*job, ErrorCode::kDeviceFailed, job->device_failure, a);
}

void GpuHealth::drain(const ReplyTo& to, const proto::GpuDrain& m, std::vector<Outgoing>& out) {
  const DeviceSlot& s = jobs_.devices().set_drain(m.device, m.drain ? m.reason : "");
  std::string by = to.peer_uid >= 0 ? " by uid " + std::to_string(to.peer_uid) : "";
  if (m.drain)
    log::notice(log::gpu(m.device, s.job),
                "GPU " + std::to_string(m.device) + " drained" + by + ": " + m.reason +
                    (s.job.empty() ? "" : " (job '" + s.job + "' keeps it until its rank ends)"));
  else
    log::notice(log::gpu(m.device), "GPU " + std::to_string(m.device) + " undrained" + by);
  send_reply(out, to, proto::Ok{});
}

}  // namespace muster::daemon
