// The NVML double's scenario file ($MUSTER_NVML_SCENARIO), one line each:
//   gpu uuid=GPU-… bus=00000000:3B:00.0 name="NVIDIA H100" memory=BYTES
//       numa=N cpus=0-23,48-71 mode=default|exclusive_process|prohibited
//       mig=0|1 ecc=N ecc_aggregate=N retired_pending=0|1 remap_failed=0|1
//       lost=0|1 procs=PID[:BYTES],…
//   xid gpu=UUID|BUS code=N          an XID event, in the order written
//   # a comment
// GPUs are numbered as NVML numbers them: by PCI bus id, whatever the order
// of the lines. Every field but uuid and bus may be left out.
#pragma once

#include <string>
#include <vector>

namespace nvml_double {

inline constexpr unsigned kMaxGpus = 64;

struct Proc {
  unsigned pid = 0;
  unsigned long long used = 0;
};

struct Gpu {
  std::string uuid, bus_id, name = "NVIDIA Double GPU", mode = "default";
  unsigned long long memory = 80ULL << 30;
  int numa = -1;
  std::vector<unsigned> cpus;
  bool mig = false, retired_pending = false, remap_failed = false, lost = false;
  unsigned long long ecc_volatile = 0, ecc_aggregate = 0;
  std::vector<Proc> procs;
};

struct Xid {
  unsigned gpu = 0;  // NVML index
  unsigned long long code = 0;
};

struct Scenario {
  std::vector<Gpu> gpus;  // in NVML (PCI bus) order
  std::vector<Xid> xids;
};

// The scenario file as it is now; empty when unset or unreadable.
Scenario load();
Scenario parse(const std::string& text);

}  // namespace nvml_double
