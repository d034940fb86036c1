#include "gpu/libraries.hpp"

#include <dlfcn.h>

#include <cstdlib>

namespace muster::gpu {

namespace {

// NVML's version calls, declared as nvml.h does (nvmlReturn_t is an enum of
// int size; NVML_SUCCESS is 0). Loaded apart from gpu::Nvml so that asking
// for the version initialises and shuts NVML down again.
std::string nvml_version() {
  const char* env = std::getenv("MUSTER_NVML_LIBRARY");
  std::string path = env && *env ? env : "libnvidia-ml.so.1";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    return "not found (cannot load " + path + (e ? std::string(": ") + e : "") + ")";
  }
  auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlShutdown"));
  auto driver =
      reinterpret_cast<int (*)(char*, unsigned)>(dlsym(lib, "nvmlSystemGetDriverVersion"));
  auto own = reinterpret_cast<int (*)(char*, unsigned)>(dlsym(lib, "nvmlSystemGetNVMLVersion"));
  std::string out;
  if (!init || !shutdown) {
    out = "not usable (" + path + " lacks nvmlInit_v2)";
  } else if (int r = init(); r != 0) {
    out = "found, but nvmlInit_v2 failed (" + std::to_string(r) + ")";
  } else {
    out = "found";
    char text[96] = {};
    if (driver && driver(text, sizeof text - 1) == 0) out += ", driver " + std::string(text);
    if (own && own(text, sizeof text - 1) == 0) out += ", NVML " + std::string(text);
    shutdown();
  }
  dlclose(lib);
  return out;
}

}  // namespace

std::string libraries_summary() {
  return "NVML: " + nvml_version() + "\nCUDA driver: " + cuda_driver_version() + "\n";
}

}  // namespace muster::gpu
