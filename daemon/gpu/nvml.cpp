#include "gpu/nvml.hpp"

#include <dlfcn.h>

#include <cstdlib>

namespace muster::gpu {

template <class F>
void Nvml::sym(F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(lib_, name));
}

Nvml::Nvml(const std::string& path) {
  lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    const char* e = dlerror();
    why_ = "cannot load " + path + (e ? std::string(": ") + e : "");
    return;
  }
  sym(init_, "nvmlInit_v2");
  sym(shutdown_, "nvmlShutdown");
  sym(count_, "nvmlDeviceGetCount_v2");
  sym(handle_, "nvmlDeviceGetHandleByIndex_v2");
  sym(name_, "nvmlDeviceGetName");
  // The rest are optional: older drivers lack some (NUMA ids, row
  // remapping), and what is missing is shown as unknown, not fatal.
  sym(uuid_, "nvmlDeviceGetUUID");
  sym(pci_, "nvmlDeviceGetPciInfo_v3");
  sym(memory_, "nvmlDeviceGetMemoryInfo");
  sym(numa_, "nvmlDeviceGetNumaNodeId");
  sym(affinity_, "nvmlDeviceGetCpuAffinity");
  sym(mode_, "nvmlDeviceGetComputeMode");
  sym(mig_, "nvmlDeviceGetMigMode");
  sym(procs_, "nvmlDeviceGetComputeRunningProcesses_v3");
  sym(ecc_, "nvmlDeviceGetTotalEccErrors");
  sym(retired_, "nvmlDeviceGetRetiredPagesPendingStatus");
  sym(remapped_, "nvmlDeviceGetRemappedRows");
  sym(ev_create_, "nvmlEventSetCreate");
  sym(ev_register_, "nvmlDeviceRegisterEvents");
  sym(ev_wait_, "nvmlEventSetWait_v2");
  sym(ev_free_, "nvmlEventSetFree");
  sym(ev_supported_, "nvmlDeviceGetSupportedEventTypes");
  sym(fields_, "nvmlDeviceGetFieldValues");  // recovery actions: drivers since r570
  sym(ancestor_, "nvmlDeviceGetTopologyCommonAncestor");
  sym(link_state_, "nvmlDeviceGetNvLinkState");
  sym(link_pci_, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  sym(link_type_, "nvmlDeviceGetNvLinkRemoteDeviceType");
  if (!init_ || !shutdown_ || !count_ || !handle_ || !name_) {
    why_ = path + " lacks the NVML entry points muster needs";
    return;
  }
  if (nvmlReturn_t r = init_(); r != NVML_SUCCESS) {
    why_ = "nvmlInit_v2 failed (" + std::to_string(r) + ")";
    shutdown_ = nullptr;
    return;
  }
  ok_ = true;
}

Nvml::~Nvml() {
  if (events_ && ev_free_) ev_free_(events_);
  if (ok_ && shutdown_) shutdown_();
  if (lib_) dlclose(lib_);
}

unsigned Nvml::count() const {
  unsigned n = 0;
  return ok_ && count_(&n) == NVML_SUCCESS ? n : 0;
}

nvmlDevice_t Nvml::handle(unsigned index) const {
  nvmlDevice_t dev = nullptr;
  return handle_(index, &dev) == NVML_SUCCESS ? dev : nullptr;
}

std::string cpu_list(const std::vector<unsigned long>& mask) {
  constexpr unsigned kBits = sizeof(unsigned long) * 8;
  std::string out;
  unsigned n = static_cast<unsigned>(mask.size()) * kBits;
  for (unsigned i = 0; i < n;) {
    if (!(mask[i / kBits] >> (i % kBits) & 1)) {
      ++i;
      continue;
    }
    unsigned j = i;
    while (j + 1 < n && (mask[(j + 1) / kBits] >> ((j + 1) % kBits) & 1)) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(i) + (j > i ? "-" + std::to_string(j) : "");
    i = j + 1;
  }
  return out;
}

Device Nvml::describe(unsigned index) const {
  Device d;
  d.index = index;
  nvmlDevice_t dev = handle(index);
  char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  if (dev && name_(dev, buf, sizeof buf) == NVML_SUCCESS) d.name = buf;
  if (dev && uuid_ && uuid_(dev, buf, sizeof buf) == NVML_SUCCESS) d.uuid = buf;
  nvmlPciInfo_t pci{};
  if (dev && pci_ && pci_(dev, &pci) == NVML_SUCCESS) d.pci_bus_id = pci.busId;
  nvmlMemory_t mem{};
  if (dev && memory_ && memory_(dev, &mem) == NVML_SUCCESS) d.memory_bytes = mem.total;
  if (dev) fill_place(dev, d);
  nvmlComputeMode_t mode = NVML_COMPUTEMODE_DEFAULT;
  if (dev && mode_ && mode_(dev, &mode) == NVML_SUCCESS)
    d.compute_mode = mode == NVML_COMPUTEMODE_PROHIBITED          ? "prohibited"
                     : mode == NVML_COMPUTEMODE_EXCLUSIVE_PROCESS ? "exclusive_process"
                                                                  : "default";
  unsigned cur = 0, pending = 0;
  d.mig = dev && mig_ && mig_(dev, &cur, &pending) == NVML_SUCCESS && cur == NVML_DEVICE_MIG_ENABLE;
  if (d.name.empty()) d.name = "GPU";
  if (auto p = processes(index)) d.processes = *p;
  d.quarantine = problem(index);
  return d;
}

// The NUMA node and CPUs near the GPU: the kernel's, from its PCI device
// (nvmlDeviceGetNumaNodeId is NOT_SUPPORTED on x86, where GPUs are no NUMA
// nodes of their own); NVML's where the kernel does not say, its NUMA id
// only where that node has CPUs (on Grace it is the GPU memory's own node,
// not the socket's).
void Nvml::fill_place(nvmlDevice_t dev, Device& d) const {
  PciPlace pci = pci_place(d.pci_bus_id);
  unsigned node = 0;
  if (pci.numa >= 0)
    d.numa_node = pci.numa;
  else if (numa_ && numa_(dev, &node) == NVML_SUCCESS && cpu_node(node))
    d.numa_node = node;
  std::vector<unsigned long> mask(16);  // 1024 CPUs
  if (!pci.cpus.empty())
    d.cpu_affinity = pci.cpus;
  else if (affinity_ &&
           affinity_(dev, static_cast<unsigned>(mask.size()), mask.data()) == NVML_SUCCESS)
    d.cpu_affinity = cpu_list(mask);
}

std::optional<std::vector<Process>> Nvml::processes(unsigned index) const {
  nvmlDevice_t dev = handle(index);
  if (!dev || !procs_) return std::nullopt;
  // Asked with room for what it said last time, as nvml.h describes: a
  // process that starts in between makes it say INSUFFICIENT_SIZE again.
  std::vector<nvmlProcessInfo_t> infos(16);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned n = static_cast<unsigned>(infos.size());
    nvmlReturn_t r = procs_(dev, &n, infos.data());
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
      infos.resize(n + 16);
      continue;
    }
    if (r != NVML_SUCCESS) return std::nullopt;
    std::vector<Process> out;
    for (unsigned i = 0; i < n; ++i) out.push_back({infos[i].pid, infos[i].usedGpuMemory});
    return out;
  }
  return std::nullopt;
}

}  // namespace muster::gpu
