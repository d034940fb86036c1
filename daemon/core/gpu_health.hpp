// A GPU that fails while the daemon runs (NVML's XID events and lost GPUs,
// which a watcher thread in the server waits for), and root's drain: what
// each means for the GPU's lease and for the job that holds it
// (gpu_health.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/job_table.hpp"
#include "core/reply.hpp"
#include "core/store.hpp"
#include "protocol/messages.hpp"

namespace muster::daemon {

class GpuHealth {
 public:
  GpuHealth(JobTable& jobs, Store& store) : jobs_(jobs), store_(store) {}
  GpuHealth(const GpuHealth&) = delete;
  GpuHealth& operator=(const GpuHealth&) = delete;

  // NVML reported XID `xid` on GPU `index`: a critical one quarantines
  // the GPU and fails the waits of the job that holds it, a contained one
  // (94) fails the job only; `health` (the GPU's health checks right after
  // it, "" when fine) non-empty quarantines it too.
  void on_xid(uint32_t index, uint64_t xid, std::vector<Outgoing>& out,
              const std::string& health = "");
  // NVML lost GPU `index` (NVML_ERROR_GPU_IS_LOST) while the daemon ran:
  // quarantined (device_failed for its job) as a critical XID is.
  void on_gpu_lost(uint32_t index, const std::string& why, std::vector<Outgoing>& out);
  // muster gpu drain / undrain; the sender is checked already (the message
  // table's admin row).
  void drain(const ReplyTo& to, const proto::GpuDrain& m, std::vector<Outgoing>& out);

 private:
  // Quarantines GPU `index` (when `quarantine`) and fails the job that
  // holds it, naming the GPU and `why`.
  void fail(uint32_t index, const std::string& why, bool quarantine, std::vector<Outgoing>& out);

  JobTable& jobs_;
  Store& store_;
};

}  // namespace muster::daemon
