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

  // XID events (health.cpp's watcher): a set with every GPU registered for
  // critical XIDs; wait() blocks up to timeout_ms and gives (index, xid).
  bool open_events();
  std::optional<std::pair<unsigned, unsigned long long>> wait_event(unsigned timeout_ms) const;

  // Fills every device's nvlinks and paths (nvml_topology.cpp), the
  // devices being GPUs 0..n-1 as describe() gave them; leaves them empty
  // (unknown) when this NVML cannot say.
  void fill_topology(std::vector<Device>& devices) const;

 private:
  template <class F>
  void sym(F& f, const char* name);
  nvmlDevice_t handle(unsigned index) const;
  bool fill_paths(std::vector<Device>& devices) const;
  void fill_nvlinks(std::vector<Device>& devices) const;

  void* lib_ = nullptr;
  bool ok_ = false;
  std::string why_;
  nvmlEventSet_t events_ = nullptr;
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

// "0-3,8": a CPU set as the kernel's cpulist format writes it.
std::string cpu_list(const std::vector<unsigned long>& mask);

}  // namespace muster::gpu
