// A faithful NVML double: libnvidia-ml's entry points that musterd uses,
// with nvml.h's types and return codes, answering from a scenario file
// ($MUSTER_NVML_SCENARIO) that it reads again on every call, so a test can
// change a GPU's state (a new process, ECC errors, a lost GPU) or append an
// XID event while the daemon runs. Format: scenario.hpp.
#include <time.h>

#include <algorithm>
#include <cstring>

#include "gpu/nvml_api.hpp"
#include "nvml_double/scenario.hpp"

struct nvmlDevice_st {
  unsigned index;
};
struct nvmlEventSet_st {
  unsigned long long mask[nvml_double::kMaxGpus] = {};
  size_t delivered = 0;  // XID lines of the scenario already given out
};

namespace {

using nvml_double::Gpu;
using nvml_double::Scenario;

nvmlDevice_st g_handles[nvml_double::kMaxGpus];
int g_init = 0;

// The GPU behind a handle, in the scenario as it is now.
nvmlReturn_t gpu_of(nvmlDevice_t dev, Scenario& s, const Gpu*& g) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (!dev || dev < g_handles || dev >= g_handles + nvml_double::kMaxGpus)
    return NVML_ERROR_INVALID_ARGUMENT;
  s = nvml_double::load();
  if (dev->index >= s.gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  g = &s.gpus[dev->index];
  return g->lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

#define WITH_GPU()        \
  Scenario s;             \
  const Gpu* g = nullptr; \
  if (nvmlReturn_t r = gpu_of(device, s, g); r) return r

nvmlReturn_t copy_str(const std::string& v, char* out, unsigned length) {
  if (!out) return NVML_ERROR_INVALID_ARGUMENT;
  if (v.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, v.c_str(), v.size() + 1);
  return NVML_SUCCESS;
}

// A PCI info as NVML fills it for the device at `bus` ("00000000:3B:00.0").
nvmlReturn_t fill_pci(const std::string& bus, unsigned device_id, nvmlPciInfo_t* pci) {
  if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
  *pci = {};
  unsigned domain = 0, bus_no = 0, dev = 0;
  std::sscanf(bus.c_str(), "%x:%x:%x", &domain, &bus_no, &dev);
  pci->domain = domain;
  pci->bus = bus_no;
  pci->device = dev;
  pci->pciDeviceId = device_id;
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", domain, bus_no, dev);
  std::snprintf(pci->busId, sizeof pci->busId, "%s", bus.c_str());
  return NVML_SUCCESS;
}

// One NVLink slot of a GPU, with nvml.h's answers for the others: an index
// past NVML_NVLINK_MAX_LINKS is invalid, a GPU without NVLink (or an entry
// point the scenario marks unsupported) NOT_SUPPORTED. A slot no line takes
// leaves `l` null, or with `far` (the question is about the far end) is
// NOT_SUPPORTED too: it has none. One that is down still names what it is
// cabled to (the daemon must ask the state first).
nvmlReturn_t link_of(nvmlDevice_t device, unsigned link, const void* out, const char* fn, bool far,
                     Scenario& s, const nvml_double::Link*& l) {
  const Gpu* g = nullptr;
  if (nvmlReturn_t r = gpu_of(device, s, g); r) return r;
  if (!out || link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
  if (s.refuses(fn) || g->links.empty()) return NVML_ERROR_NOT_SUPPORTED;
  l = link < g->links.size() ? &g->links[link] : nullptr;
  return !l && far ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

#define WITH_LINK(out, far)             \
  Scenario s;                           \
  const nvml_double::Link* l = nullptr; \
  if (nvmlReturn_t r = link_of(device, link, out, __func__, far, s, l); r) return r

}  // namespace

static_assert(nvml_double::kMaxLinks == NVML_NVLINK_MAX_LINKS);

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT nvmlReturn_t nvmlInit_v2() {
  ++g_init;
  for (unsigned i = 0; i < nvml_double::kMaxGpus; ++i) g_handles[i].index = i;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlShutdown() {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  --g_init;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (!deviceCount) return NVML_ERROR_INVALID_ARGUMENT;
  *deviceCount = static_cast<unsigned>(nvml_double::load().gpus.size());
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  auto s = nvml_double::load();
  if (!device || index >= s.gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_handles[index];
  return NVML_SUCCESS;  // as the driver does: a lost GPU fails its queries
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  WITH_GPU();
  return copy_str(g->name, name, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  WITH_GPU();
  return copy_str(g->uuid, uuid, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  WITH_GPU();
  return fill_pci(g->bus_id, 0x233010de, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  WITH_GPU();
  if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned long long used = 0;
  for (const auto& p : g->procs) used += p.used;
  *memory = {g->memory, g->memory - std::min(used, g->memory), std::min(used, g->memory)};
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node) {
  WITH_GPU();
  if (!node) return NVML_ERROR_INVALID_ARGUMENT;
  if (g->numa < 0) return NVML_ERROR_NOT_SUPPORTED;
  *node = static_cast<unsigned>(g->numa);
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                             unsigned long* cpuSet) {
  WITH_GPU();
  if (!cpuSet || cpuSetSize == 0) return NVML_ERROR_INVALID_ARGUMENT;
  constexpr unsigned kBits = sizeof(unsigned long) * 8;
  std::fill(cpuSet, cpuSet + cpuSetSize, 0UL);
  for (unsigned cpu : g->cpus)
    if (cpu / kBits < cpuSetSize) cpuSet[cpu / kBits] |= 1UL << (cpu % kBits);
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode) {
  WITH_GPU();
  if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
  *mode = g->mode == "exclusive_process" ? NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
          : g->mode == "prohibited"      ? NVML_COMPUTEMODE_PROHIBITED
                                         : NVML_COMPUTEMODE_DEFAULT;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode,
                                         unsigned int* pendingMode) {
  WITH_GPU();
  if (!currentMode || !pendingMode) return NVML_ERROR_INVALID_ARGUMENT;
  *currentMode = *pendingMode = g->mig ? NVML_DEVICE_MIG_ENABLE : 0;
  return NVML_SUCCESS;
}

// nvml.h: with *infoCount too small, INSUFFICIENT_SIZE and the count needed.
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                            unsigned int* infoCount,
                                                            nvmlProcessInfo_t* infos) {
  WITH_GPU();
  if (!infoCount) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned n = static_cast<unsigned>(g->procs.size());
  if (*infoCount < n || (!infos && n)) {
    *infoCount = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned i = 0; i < n; ++i)
    infos[i] = {g->procs[i].pid, g->procs[i].used, 0xFFFFFFFFu, 0xFFFFFFFFu};
  *infoCount = n;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                nvmlMemoryErrorType_t errorType,
                                                nvmlEccCounterType_t counterType,
                                                unsigned long long* eccCounts) {
  WITH_GPU();
  if (!eccCounts || errorType >= NVML_MEMORY_ERROR_TYPE_COUNT ||
      counterType >= NVML_ECC_COUNTER_TYPE_COUNT)
    return NVML_ERROR_INVALID_ARGUMENT;
  bool unc = errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED;
  bool vol = counterType == NVML_VOLATILE_ECC;
  *eccCounts = unc ? (vol ? g->ecc_volatile : g->ecc_aggregate) : 0;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                           nvmlEnableState_t* isPending) {
  WITH_GPU();
  if (!isPending) return NVML_ERROR_INVALID_ARGUMENT;
  *isPending = g->retired_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corrRows,
                                              unsigned int* uncRows, unsigned int* isPending,
                                              unsigned int* failureOccurred) {
  WITH_GPU();
  if (!corrRows || !uncRows || !isPending || !failureOccurred) return NVML_ERROR_INVALID_ARGUMENT;
  if (g->mig) return NVML_ERROR_NOT_SUPPORTED;  // nvml.h: not under MIG
  *corrRows = 0;
  *uncRows = g->remap_failed ? 1 : 0;
  *isPending = 0;
  *failureOccurred = g->remap_failed ? 1 : 0;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (!set) return NVML_ERROR_INVALID_ARGUMENT;
  *set = new nvmlEventSet_st;
  // Events already in the file happened before the set existed.
  (*set)->delivered = nvml_double::load().xids.size();
  return NVML_SUCCESS;
}

#ifndef NVML_DOUBLE_OLD_DRIVER
EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                     unsigned long long* eventTypes) {
  WITH_GPU();
  if (!eventTypes) return NVML_ERROR_INVALID_ARGUMENT;
  if (s.refuses(__func__)) return NVML_ERROR_NOT_SUPPORTED;
  *eventTypes = g->events;
  return NVML_SUCCESS;
}

// nvml.h: values[i].nvmlReturn says per field; the call fails only as a
// whole (a bad argument, a lost GPU).
EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                             nvmlFieldValue_t* values) {
  WITH_GPU();
  if (!values || valuesCount <= 0) return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < valuesCount; ++i) {
    nvmlFieldValue_t& v = values[i];
    v.timestamp = 0;
    v.latencyUsec = 0;
    if (v.fieldId != NVML_FI_DEV_GET_GPU_RECOVERY_ACTION || s.refuses(__func__)) {
      v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      continue;
    }
    v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v.nvmlReturn = NVML_SUCCESS;
    v.value.uiVal = g->recovery;
  }
  return NVML_SUCCESS;
}
#endif

// nvml.h: NOT_SUPPORTED "if the platform does not support this feature or
// some of requested event types"; nothing is registered then.
EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                             nvmlEventSet_t set) {
  WITH_GPU();
  if (!set) return NVML_ERROR_INVALID_ARGUMENT;
  if (s.refuses(__func__) || (eventTypes & ~g->events)) return NVML_ERROR_NOT_SUPPORTED;
  set->mask[device->index] |= eventTypes;
  return NVML_SUCCESS;
}

// Polls the scenario file for an XID line not yet given out: the double's
// stand-in for the driver's event queue.
EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                        unsigned int timeoutms) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned waited = 0;; waited += 10) {
    auto s = nvml_double::load();
    // As the driver does: a lost GPU in the set fails every wait at once,
    // whatever the timeout.
    for (unsigned i = 0; i < s.gpus.size(); ++i)
      if (set->mask[i] && s.gpus[i].lost) return NVML_ERROR_GPU_IS_LOST;
    if (s.refuses(__func__)) return NVML_ERROR_UNKNOWN;
    while (set->delivered < s.xids.size()) {
      const auto& x = s.xids[set->delivered++];
      if (x.gpu >= s.gpus.size() || !(set->mask[x.gpu] & nvmlEventTypeXidCriticalError)) continue;
      *data = {&g_handles[x.gpu], nvmlEventTypeXidCriticalError, x.code, 0xFFFFFFFFu, 0xFFFFFFFFu};
      return NVML_SUCCESS;
    }
    if (waited >= timeoutms) return NVML_ERROR_TIMEOUT;
    struct timespec ten_ms = {0, 10 * 1000 * 1000};
    nanosleep(&ten_ms, nullptr);
  }
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  if (!set) return NVML_ERROR_INVALID_ARGUMENT;
  delete set;
  return NVML_SUCCESS;
}

// The common PCIe ancestor, from the gpu lines' switch=, bridge= and numa=
// (scenario.hpp).
EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                        nvmlGpuTopologyLevel_t* pathInfo) {
  // Each gpu_of() reads the scenario anew: b's read must not free a's GPU.
  Scenario s, s2;
  const Gpu *a = nullptr, *b = nullptr;
  if (nvmlReturn_t r = gpu_of(device1, s, a); r) return r;
  if (nvmlReturn_t r = gpu_of(device2, s2, b); r) return r;
  if (!pathInfo) return NVML_ERROR_INVALID_ARGUMENT;
  if (s.refuses("nvmlDeviceGetTopologyCommonAncestor")) return NVML_ERROR_NOT_SUPPORTED;
  auto shared = [](const std::string& x, const std::string& y) { return !x.empty() && x == y; };
  int forced = device1 == device2 ? -1 : std::max(a->level, b->level);
  *pathInfo = forced >= 0                              ? static_cast<nvmlGpuTopologyLevel_t>(forced)
              : device1 == device2                     ? NVML_TOPOLOGY_INTERNAL
              : shared(a->pcie_switch, b->pcie_switch) ? NVML_TOPOLOGY_SINGLE
              : shared(a->bridge, b->bridge)           ? NVML_TOPOLOGY_HOSTBRIDGE
              : a->numa >= 0 && a->numa == b->numa     ? NVML_TOPOLOGY_NODE
                                                       : NVML_TOPOLOGY_SYSTEM;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                             nvmlEnableState_t* isActive) {
  WITH_LINK(isActive, false);
  *isActive = l && l->active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                        nvmlPciInfo_t* pci) {
  WITH_LINK(pci, true);
  return fill_pci(l->remote_bus, l->to_switch ? 0x22a310de : 0x233010de, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(
    nvmlDevice_t device, unsigned int link, nvmlIntNvLinkDeviceType_t* pNvLinkDeviceType) {
  WITH_LINK(pNvLinkDeviceType, true);
  *pNvLinkDeviceType = l->to_switch ? NVML_NVLINK_DEVICE_TYPE_SWITCH : NVML_NVLINK_DEVICE_TYPE_GPU;
  return NVML_SUCCESS;
}
