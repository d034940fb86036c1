// NVML through dlopen: the daemon runs on GPU nodes whose driver provides
// libnvidia-ml.so.1, and must still start on machines without one. This is
// the one place that calls NVML; tests put their NVML double in its place
// with MUSTER_NVML_LIBRARY.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gpu/inventory.hpp"
#include "gpu/nvml_api.hpp"

namespace muster::gpu {

class Nvml {
 public:
  // Loads and initialises the library at `path`; nullopt-like failure is
  // reported through ok() with why().
  explicit Nvml(const std::string& path);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  unsigned count() const;
  // Everything the inventory shows of GPU `index`, its health included.
  Device describe(unsigned index) const;
  // The compute processes on GPU `index` now; nullopt when NVML cannot say.
  std::optional<std::vector<Process>> processes(unsigned index) const;
  // Why GPU `index` must not be leased now (health, MIG); empty when fine.
  std::string problem(unsigned index) const;

  // XID events (xid_watch.cpp's thread): a new set with each GPU but those
  // in `skip` registered for the critical-XID events it supports
  // (nvmlDeviceGetSupportedEventTypes); every GPU that cannot be watched
  // is logged once, with why. False when this NVML offers no events.
  bool open_events(const std::vector<unsigned>& skip = {});
  // How many GPUs the set watches.
  unsigned watched() const { return watched_; }
  // What one nvmlEventSetWait_v2 gave: an XID on GPU `index`, nothing
  // within timeout_ms, NVML_ERROR_GPU_IS_LOST (which NVML returns at once,
  // every time, while a GPU of the set is lost), or another error.
  struct Event {
    enum Kind { kXid, kTimeout, kLost, kError } kind = kTimeout;
    unsigned index = 0;
    unsigned long long xid = 0;
    int error = 0;
  };
  Event wait_event(unsigned timeout_ms) const;
  // Whether this NVML reports the driver's recovery action (r570 and newer).
  bool reports_recovery() const { return fields_ != nullptr; }
  // Whether GPU `index` answers NVML_ERROR_GPU_IS_LOST.
  bool lost(unsigned index) const;

  // Fills every device's nvlinks and paths (nvml_topology.cpp), the
  // devices being GPUs 0..n-1 as describe() gave them; leaves them empty
  // (unknown) when this NVML cannot say.
  void fill_topology(std::vector<Device>& devices) const;

 private:
  template <class F>
  void sym(F& f, const char* name);
  nvmlDevice_t handle(unsigned index) const;
  std::string recovery_action(nvmlDevice_t dev) const;
  std::string watch(unsigned index);
  void fill_place(nvmlDevice_t dev, Device& d) const;
  bool fill_paths(std::vector<Device>& devices) const;
  void fill_nvlinks(std::vector<Device>& devices) const;

  void* lib_ = nullptr;
  bool ok_ = false;
  std::string why_;
  nvmlEventSet_t events_ = nullptr;
  unsigned watched_ = 0;
  std::vector<bool> said_unwatched_;  // logged once each
  nvml_fn::Init init_ = nullptr;
  nvml_fn::Shutdown shutdown_ = nullptr;
  nvml_fn::GetCount count_ = nullptr;
  nvml_fn::GetHandleByIndex handle_ = nullptr;
  nvml_fn::GetString name_ = nullptr, uuid_ = nullptr;
  nvml_fn::GetPciInfo pci_ = nullptr;
  nvml_fn::GetMemoryInfo memory_ = nullptr;
  nvml_fn::GetNumaNodeId numa_ = nullptr;
  nvml_fn::GetCpuAffinity affinity_ = nullptr;
  nvml_fn::GetComputeMode mode_ = nullptr;
  nvml_fn::GetMigMode mig_ = nullptr;
  nvml_fn::GetProcesses procs_ = nullptr;
  nvml_fn::GetTotalEccErrors ecc_ = nullptr;
  nvml_fn::GetRetiredPagesPending retired_ = nullptr;
  nvml_fn::GetRemappedRows remapped_ = nullptr;
  nvml_fn::EventSetCreate ev_create_ = nullptr;
  nvml_fn::RegisterEvents ev_register_ = nullptr;
  nvml_fn::EventSetWait ev_wait_ = nullptr;
  nvml_fn::EventSetFree ev_free_ = nullptr;
  nvml_fn::GetSupportedEventTypes ev_supported_ = nullptr;
  nvml_fn::GetFieldValues fields_ = nullptr;
  nvml_fn::GetTopologyCommonAncestor ancestor_ = nullptr;
  nvml_fn::GetNvLinkState link_state_ = nullptr;
  nvml_fn::GetNvLinkRemotePciInfo link_pci_ = nullptr;
  nvml_fn::GetNvLinkRemoteDeviceType link_type_ = nullptr;
};

// The pids of the compute processes on GPU `index` now (none when unknown),
// and a pid's parent from /proc (0 when it is gone): the foreign-use test.
std::vector<int64_t> compute_pids(const Nvml& nvml, unsigned index);
int64_t parent_pid(int64_t pid);

// "00000000:3B:00.0" however NVML or a caller spelled it ("0000:3b:00.0"):
// an eight-digit domain, upper-case hex; unparsable ids only upper-cased.
std::string normal_bus_id(const std::string& id);

// Where the kernel places the PCI device `bus_id` (NVML's spelling):
// /sys/bus/pci/devices/<bus>/numa_node and local_cpulist, read under
// $MUSTER_TEST_SYSROOT instead of / when set (tests' fake tree). numa -1
// and cpus "" where the kernel does not say.
struct PciPlace {
  int64_t numa = -1;
  std::string cpus;
};
PciPlace pci_place(const std::string& bus_id);
// Whether NUMA node `node` has CPUs: false only where sysfs says it has
// none (a GPU's own memory node, as on Grace), true where it cannot say.
bool cpu_node(int64_t node);

// "0-3,8": a CPU set as the kernel's cpulist format writes it.
std::string cpu_list(const std::vector<unsigned long>& mask);

}  // namespace muster::gpu
