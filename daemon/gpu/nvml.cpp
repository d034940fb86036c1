// NVML through dlopen: the daemon runs on GPU nodes whose driver provides
// libnvidia-ml.so.1, and must still start on machines without one.
#include <dlfcn.h>

#include "gpu/inventory.hpp"

namespace muster::gpu {

namespace {
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
using InitFn = nvmlReturn_t (*)();
using CountFn = nvmlReturn_t (*)(unsigned*);
using HandleFn = nvmlReturn_t (*)(unsigned, nvmlDevice_t*);
using NameFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned);
}  // namespace

bool discover_nvml(std::vector<Device>& out) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return false;
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<InitFn>(dlsym(lib, "nvmlShutdown"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<HandleFn>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto name = reinterpret_cast<NameFn>(dlsym(lib, "nvmlDeviceGetName"));
  bool ok = false;
  if (init && shutdown && count && handle && name && init() == 0) {
    unsigned n = 0;
    if (count(&n) == 0) {
      ok = true;
      for (unsigned i = 0; i < n; ++i) {
        nvmlDevice_t dev = nullptr;
        char buf[96] = "GPU";
        if (handle(i, &dev) == 0) name(dev, buf, sizeof buf);
        buf[sizeof buf - 1] = 0;
        out.push_back({i, buf});
      }
    }
    shutdown();
  }
  dlclose(lib);
  return ok;
}

}  // namespace muster::gpu
