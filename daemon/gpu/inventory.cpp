#include "gpu/inventory.hpp"

#include "gpu/nvml.hpp"

namespace muster::gpu {

Inventory discover(int simulate) {
  Inventory inv;
  if (simulate >= 0) {
    for (int i = 0; i < simulate; ++i) {
      Device d;
      d.index = static_cast<uint32_t>(i);
      d.name = "simulated GPU " + std::to_string(i);
      inv.devices.push_back(std::move(d));
    }
    inv.source = "simulated";
    return inv;
  }
  if ((inv.nvml = load_nvml(inv.devices))) {
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
