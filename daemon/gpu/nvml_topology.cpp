// The interconnect matrix from NVML: how many active NVLinks join each pair
// of GPUs (directly, or through the NVSwitch fabric), and their closest
// common PCIe ancestor. Every entry point here is optional: a driver
// without them leaves the topology unknown, never the daemon down.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>

#include "gpu/nvml.hpp"

namespace muster::gpu {

std::string normal_bus_id(const std::string& id) {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  char tail = 0;
  if (std::sscanf(id.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &tail) == 4) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%08X:%02X:%02X.%X", domain, bus, dev, fn);
    return buf;
  }
  std::string out = id;
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

void Nvml::fill_topology(std::vector<Device>& devices) const {
  size_t n = devices.size();
  for (size_t i = 0; i < n; ++i) {
    devices[i].nvlinks.assign(n, 0);
    devices[i].paths.assign(n, static_cast<int32_t>(Path::kSystem));
    devices[i].paths[i] = static_cast<int32_t>(Path::kSelf);
  }
  // The common ancestors are the matrix: without them nothing is known (an
  // NVML too old to place GPUs, one that fails for every pair). NVLink
  // counts stay 0 where NVML has none to give (GPUs without NVLink).
  if (!fill_paths(devices)) {
    for (auto& d : devices) {
      d.nvlinks.clear();
      d.paths.clear();
    }
    return;
  }
  fill_nvlinks(devices);
}

// nvmlDeviceGetTopologyCommonAncestor for every pair; a pair NVML cannot
// place stays kSystem. True when this NVML answered at least once.
bool Nvml::fill_paths(std::vector<Device>& devices) const {
  if (!ok_ || !ancestor_) return false;
  size_t n = devices.size();
  bool answered = n == 1 && handle(0);
  for (size_t i = 0; i < n; ++i) {
    nvmlDevice_t a = handle(static_cast<unsigned>(i));
    for (size_t j = i + 1; a && j < n; ++j) {
      nvmlDevice_t b = handle(static_cast<unsigned>(j));
      nvmlGpuTopologyLevel_t level = NVML_TOPOLOGY_SYSTEM;
      if (!b || ancestor_(a, b, &level) != NVML_SUCCESS) continue;
      answered = true;
      // A level newer than nvml.h's (or garbage) reads as the farthest: the
      // status reply's readers take 0..100 only, and placement must not
      // mistake it for a near one.
      int32_t v = static_cast<int32_t>(level);
      if (v < 0 || v > static_cast<int32_t>(Path::kSystem)) v = static_cast<int32_t>(Path::kSystem);
      devices[i].paths[j] = devices[j].paths[i] = v;
    }
  }
  return answered;
}

namespace {

// NVIDIA's NVSwitch PCI device ids (the high half of nvmlPciInfo_t's
// pciDeviceId, vendor 0x10de in the low half): the first generation
// (DGX-2), the second (HGX A100), the third (HGX H100).
bool nvswitch_id(unsigned pci_device_id) {
  if ((pci_device_id & 0xffff) != 0x10de) return false;
  unsigned id = pci_device_id >> 16;
  return id == 0x1ac0 || id == 0x1ac1 || id == 0x1ac2 || id == 0x1af1 || id == 0x22a3;
}

// What the far end of one active link is: one of the other GPUs (`gpu`,
// its index, or -1), else what NVML's device type says, else, where the
// type is not to be had, a switch only when its PCI id is an NVSwitch's. A
// guess would be worse than nothing: a GPU this daemon does not see (a
// container's NVIDIA_VISIBLE_DEVICES) would make its partners look joined
// to every other GPU.
enum class Far { kGpu, kSwitch, kOther };
Far far_end(long gpu, bool own, std::optional<nvmlIntNvLinkDeviceType_t> type,
            unsigned pci_device_id) {
  if (gpu >= 0) return Far::kGpu;
  if (type) return *type == NVML_NVLINK_DEVICE_TYPE_SWITCH ? Far::kSwitch : Far::kOther;
  return !own && nvswitch_id(pci_device_id) ? Far::kSwitch : Far::kOther;
}

}  // namespace

// Each GPU's active links, by what their far end is: another GPU (counted
// to it), an NVSwitch (counted apart), or something else (an IBM NPU, a
// GPU this daemon does not see: ignored). Where NVML cannot name the far
// end's type, its PCI id tells an NVSwitch (far_end).
// GPUs that both reach the switch fabric are joined all-to-all, with the
// links of the one with fewer (an NVSwitch node: NV18 between every pair).
void Nvml::fill_nvlinks(std::vector<Device>& devices) const {
  if (!ok_ || !link_state_ || !link_pci_) return;
  size_t n = devices.size();
  std::vector<std::string> buses(n);
  for (size_t i = 0; i < n; ++i) buses[i] = normal_bus_id(devices[i].pci_bus_id);
  std::vector<uint32_t> to_switch(n, 0);
  for (size_t i = 0; i < n; ++i) {
    nvmlDevice_t dev = handle(static_cast<unsigned>(i));
    for (unsigned link = 0; dev && link < NVML_NVLINK_MAX_LINKS; ++link) {
      nvmlEnableState_t active = NVML_FEATURE_DISABLED;
      nvmlReturn_t r = link_state_(dev, link, &active);
      if (r == NVML_ERROR_NOT_SUPPORTED) break;  // a GPU without NVLink
      if (r != NVML_SUCCESS) continue;           // past this GPU's links
      nvmlPciInfo_t far{};
      if (active != NVML_FEATURE_ENABLED || link_pci_(dev, link, &far) != NVML_SUCCESS) continue;
      std::string bus = normal_bus_id(far.busId[0] ? far.busId : far.busIdLegacy);
      long gpu = bus.empty() ? static_cast<long>(n)
                             : std::find(buses.begin(), buses.end(), bus) - buses.begin();
      bool own = static_cast<size_t>(gpu) == i || bus.empty();  // nameless: no switch either
      if (own || static_cast<size_t>(gpu) == n) gpu = -1;
      std::optional<nvmlIntNvLinkDeviceType_t> type;
      if (nvmlIntNvLinkDeviceType_t t{}; link_type_ && link_type_(dev, link, &t) == NVML_SUCCESS)
        type = t;
      Far kind = far_end(gpu, own, type, far.pciDeviceId);
      if (kind == Far::kGpu) ++devices[i].nvlinks[static_cast<size_t>(gpu)];
      if (kind == Far::kSwitch) ++to_switch[i];
    }
  }
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      uint32_t fabric = std::min(to_switch[i], to_switch[j]);
      devices[i].nvlinks[j] += fabric;
      devices[j].nvlinks[i] += fabric;
    }
}

}  // namespace muster::gpu
