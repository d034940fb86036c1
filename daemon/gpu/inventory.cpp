#include "gpu/inventory.hpp"

namespace muster::gpu {

Inventory discover(int simulate) {
  Inventory inv;
  if (simulate >= 0) {
    for (int i = 0; i < simulate; ++i)
      inv.devices.push_back({static_cast<uint32_t>(i), "simulated GPU " + std::to_string(i)});
    inv.source = "simulated";
    return inv;
  }
  if (discover_nvml(inv.devices)) {
    inv.source = "nvml";
  } else if (discover_cuda(inv.devices)) {
    inv.source = "cuda";
  } else {
    inv.devices.clear();
    inv.source = "none";
  }
  return inv;
}

}  // namespace muster::gpu
