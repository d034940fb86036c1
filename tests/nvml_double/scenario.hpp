// The NVML double's scenario file ($MUSTER_NVML_SCENARIO), one line each:
//   gpu uuid=GPU-… bus=00000000:3B:00.0 name="NVIDIA H100" memory=BYTES
//       numa=N cpus=0-23,48-71 mode=default|exclusive_process|prohibited
//       mig=0|1 ecc=N ecc_aggregate=N retired_pending=0|1 remap_failed=0|1
//       lost=0|1 procs=PID[:BYTES],… switch=ID bridge=ID level=N
//       events=MASK recovery=N
//       events: the event types it supports (nvmlEventType* bits, in hex
//       or decimal; default 0x1f, XIDs among them): 0 as a GeForce board
//       or a vGPU profile without XID events. recovery: the driver's
//       recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), default 0.
//       lost=1 written while the daemon runs is a GPU lost mid-run: its
//       queries, and every event wait of a set it is in, answer
//       NVML_ERROR_GPU_IS_LOST at once.
//   xid gpu=UUID|BUS code=N          an XID event, in the order written
//   nvlink a=UUID|BUS b=UUID|BUS count=N [active=0|1]
//       N NVLinks between two GPUs, in the next free link slots of both;
//       the remote PCI info of each is the other GPU's bus id, spelled as
//       this line names it when it names it by bus id (a test of how the
//       daemon compares them), else as its gpu line does. active=0: the
//       slots are taken but the links down (state DISABLED; the remote
//       PCI info and type still name the far end).
//   nvswitch gpu=UUID|BUS links=N bus=SWITCHBUS
//       N NVLinks from a GPU to an NVSwitch (remote device type SWITCH, the
//       remote PCI info the switch's bus id), in its next free slots.
//   unsupported fn=NAME,NAME          these entry points answer
//       NVML_ERROR_NOT_SUPPORTED (a driver, or a VM, that cannot say);
//       nvmlEventSetWait_v2 there answers NVML_ERROR_UNKNOWN at once (a
//       driver in trouble), nvmlDeviceRegisterEvents NOT_SUPPORTED.
//   # a comment
// GPUs are numbered as NVML numbers them: by PCI bus id, whatever the order
// of the lines. Every field but uuid and bus may be left out.
//
// Topology (nvmlDeviceGetTopologyCommonAncestor) follows the gpu lines: the
// same GPU INTERNAL (0); the same switch=ID SINGLE (10, PIX); the same
// bridge=ID HOSTBRIDGE (30, PHB); the same numa=N NODE (40); else SYSTEM
// (50, SYS); level=N on either GPU's line: N, whatever it is (a driver
// newer than nvml.h, or a misreport). A GPU named in an nvlink or nvswitch line has
// NVML_NVLINK_MAX_LINKS link slots, those no line takes DISABLED (with no
// remote PCI info or type: NOT_SUPPORTED); one that
// none names answers NOT_SUPPORTED (a GPU without NVLink). A link index
// past NVML_NVLINK_MAX_LINKS is INVALID_ARGUMENT.
#pragma once

#include <string>
#include <vector>

namespace nvml_double {

inline constexpr unsigned kMaxGpus = 64;
inline constexpr unsigned kMaxLinks = 18;  // nvml.h's NVML_NVLINK_MAX_LINKS

struct Proc {
  unsigned pid = 0;
  unsigned long long used = 0;
};

struct Link {
  std::string remote_bus;  // as the remote PCI info reports it
  bool to_switch = false;  // remote device type SWITCH, else GPU
  bool active = true;
};

struct Gpu {
  std::string uuid, bus_id, name = "NVIDIA Double GPU", mode = "default";
  unsigned long long memory = 80ULL << 30;
  int numa = -1;
  std::vector<unsigned> cpus;
  bool mig = false, retired_pending = false, remap_failed = false, lost = false;
  unsigned long long events = 0x1f;  // nvmlEventType* bits it supports
  unsigned recovery = 0;             // nvmlDeviceGpuRecoveryAction_t
  unsigned long long ecc_volatile = 0, ecc_aggregate = 0;
  std::vector<Proc> procs;
  std::string pcie_switch, bridge;  // empty: none shared with any GPU
  int level = -1;                   // level=: the common ancestor with any GPU
  std::vector<Link> links;          // its NVLink slots in use, from 0
};

struct Xid {
  unsigned gpu = 0;  // NVML index
  unsigned long long code = 0;
};

struct Scenario {
  std::vector<Gpu> gpus;  // in NVML (PCI bus) order
  std::vector<Xid> xids;
  std::vector<std::string> unsupported;  // entry points that say NOT_SUPPORTED
  bool refuses(const char* fn) const;
};

// The scenario file as it is now; empty when unset or unreadable.
Scenario load();
Scenario parse(const std::string& text);

}  // namespace nvml_double
