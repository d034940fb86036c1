// The CUDA driver as a second source of truth where NVML is absent (some
// containers ship libcuda but not the NVML library). The driver API is
// loaded at run time like NVML: a GPU node has libcuda.so.1 whenever it has a
// driver, while the CUDA runtime (libcudart.so.N) is the toolkit's, which a
// driver-only node lacks and whose soname changes with every major release.
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "device_list.hpp"
#include "gpu/inventory.hpp"
#include "muster_config.h"

namespace muster::gpu {

namespace {

// Without HAVE_CUDA (-Dcuda=disabled) the build asks no CUDA library at all,
// NVML being its only source of GPUs.
#if HAVE_CUDA
// The few driver API types discover_cuda uses, as NVIDIA's cuda.h declares
// them (CUresult is an enum of int size, CUdevice an int, CUuuid 16 bytes).
using CUresult = int;
using CUdevice = int;
struct CUuuid {
  char bytes[16];
};
constexpr CUresult kCudaSuccess = 0;

struct Driver {
  void* lib = nullptr;
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*version)(int*) = nullptr;
  CUresult (*count)(int*) = nullptr;
  CUresult (*get)(CUdevice*, int) = nullptr;
  CUresult (*name)(char*, int, CUdevice) = nullptr;
  CUresult (*uuid)(CUuuid*, CUdevice) = nullptr;
  CUresult (*bus_id)(char*, int, CUdevice) = nullptr;
  CUresult (*memory)(size_t*, CUdevice) = nullptr;

  template <class F>
  void sym(F& f, const char* n) {
    f = reinterpret_cast<F>(dlsym(lib, n));
  }
};

// $MUSTER_CUDA_LIBRARY (tests' double) or the driver's libcuda.so.1; null
// when neither loads or the entry points discovery needs are missing.
bool load(Driver& d, std::string& why) {
  const char* env = std::getenv("MUSTER_CUDA_LIBRARY");
  std::string path = env && *env ? env : "libcuda.so.1";
  d.lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!d.lib) {
    const char* e = dlerror();
    why = "cannot load " + path + (e ? std::string(": ") + e : "");
    return false;
  }
  d.sym(d.init, "cuInit");
  d.sym(d.version, "cuDriverGetVersion");
  d.sym(d.count, "cuDeviceGetCount");
  d.sym(d.get, "cuDeviceGet");
  d.sym(d.name, "cuDeviceGetName");
  // cuda.h maps cuDeviceGetUuid to its _v2 (CUDA 11.4+); older drivers have
  // only the first, which gives the same UUID for a whole GPU.
  d.sym(d.uuid, "cuDeviceGetUuid_v2");
  if (!d.uuid) d.sym(d.uuid, "cuDeviceGetUuid");
  d.sym(d.bus_id, "cuDeviceGetPCIBusId");
  d.sym(d.memory, "cuDeviceTotalMem_v2");
  if (!d.init || !d.count || !d.get || !d.name) {
    why = path + " lacks the CUDA driver entry points muster needs";
    return false;
  }
  return true;
}

// The driver writes "0000:3b:00.0" (a 4-digit domain); NVML and the rest of
// muster "00000000:3B:00.0". One form, so that a bus id from either source
// compares and sorts the same.
std::string nvml_bus_id(std::string id) {
  if (auto colon = id.find(':'); colon != std::string::npos && colon < 8)
    id.insert(0, 8 - colon, '0');
  for (auto& c : id) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return id;
}
#endif

}  // namespace

std::string cuda_driver_version() {
#if HAVE_CUDA
  Driver d;
  std::string why;
  if (!load(d, why)) return "not found (" + why + ")";
  int v = 0;
  std::string out = "found";
  if (d.version && d.version(&v) == kCudaSuccess)
    out += ", driver API " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  dlclose(d.lib);
  return out;
#else
  return "disabled in this build";
#endif
}

bool discover_cuda([[maybe_unused]] std::vector<Device>& out) {
#if HAVE_CUDA
  Driver d;
  std::string why;
  if (!load(d, why)) return false;
  int n = 0;
  if (d.init(0) != kCudaSuccess || d.count(&n) != kCudaSuccess) {
    dlclose(d.lib);
    return false;
  }
  std::vector<Device> found;
  for (int i = 0; i < n; ++i) {
    CUdevice dev = 0;
    if (d.get(&dev, i) != kCudaSuccess) continue;
    Device g;
    char text[256] = {};
    g.name = d.name(text, sizeof text - 1, dev) == kCudaSuccess ? text : "GPU";
    if (CUuuid u{}; d.uuid && d.uuid(&u, dev) == kCudaSuccess) g.uuid = gpu_uuid_text(u.bytes);
    if (char bus[64] = {}; d.bus_id && d.bus_id(bus, sizeof bus - 1, dev) == kCudaSuccess)
      g.pci_bus_id = nvml_bus_id(bus);
    if (size_t bytes = 0; d.memory && d.memory(&bytes, dev) == kCudaSuccess) g.memory_bytes = bytes;
    found.push_back(std::move(g));
  }
  // The driver numbers GPUs fastest-first unless CUDA_DEVICE_ORDER says
  // otherwise; muster's indices are NVML's, which is PCI bus order, and its
  // workers run with CUDA_DEVICE_ORDER=PCI_BUS_ID. Sort, then number.
  std::stable_sort(found.begin(), found.end(),
                   [](const Device& a, const Device& b) { return a.pci_bus_id < b.pci_bus_id; });
  for (size_t i = 0; i < found.size(); ++i) {
    found[i].index = static_cast<uint32_t>(i);
    out.push_back(std::move(found[i]));
  }
  // The library stays loaded: dlclose of a driver that made a context is
  // not safe, and discovery runs once.
  return true;
#else
  return false;
#endif
}

}  // namespace muster::gpu
