// What GPUs this node has. Discovery never needs a GPU library at build time:
// NVML is loaded with dlopen, the CUDA runtime only when the build found it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace muster::gpu {

struct Device {
  uint32_t index = 0;
  std::string name;
};

struct Inventory {
  std::vector<Device> devices;
  std::string source;  // "nvml", "cuda", "simulated" or "none"
};

// simulate >= 0 pretends that many devices exist (tests, demos).
Inventory discover(int simulate);

// Kept apart so each can be tried (and fail) on its own.
bool discover_nvml(std::vector<Device>& out);
bool discover_cuda(std::vector<Device>& out);

}  // namespace muster::gpu
