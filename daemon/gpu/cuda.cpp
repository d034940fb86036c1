// The CUDA runtime as a second source of truth where NVML is absent (some
// containers ship libcudart but not the NVML library).
#include "gpu/inventory.hpp"
#include "muster_config.h"

#if HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace muster::gpu {

bool discover_cuda([[maybe_unused]] std::vector<Device>& out) {
#if HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return false;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    std::string name = cudaGetDeviceProperties(&prop, i) == cudaSuccess ? prop.name : "GPU";
    Device d;
    d.index = static_cast<uint32_t>(i);
    d.name = name;
    out.push_back(std::move(d));
  }
  return true;
#else
  return false;
#endif
}

}  // namespace muster::gpu
