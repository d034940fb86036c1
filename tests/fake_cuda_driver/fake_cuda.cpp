// A stand-in for the CUDA driver (libcuda.so.1) with three GPUs, numbered
// fastest-first as the driver does by default — not in PCI bus order — so
// that a test sees musterd's CUDA fallback (no NVML) number them in PCI bus
// order, as NVML and muster's workers (CUDA_DEVICE_ORDER=PCI_BUS_ID) do, and
// record each one's UUID and bus id. Types as cuda.h declares them.
#include <cstdio>
#include <cstring>

extern "C" {

using CUresult = int;
using CUdevice = int;
struct CUuuid {
  char bytes[16];
};

namespace {
// The driver's order: bus 81, then 01, then 41.
const char* const kBus[] = {"0000:81:00.0", "0000:01:00.0", "0000:41:00.0"};
const char kUuidLast[] = {'\x81', '\x01', '\x41'};
constexpr int kCount = 3;
constexpr CUresult kInvalidDevice = 101;  // CUDA_ERROR_INVALID_DEVICE
}  // namespace

#define EXPORT __attribute__((visibility("default")))

EXPORT CUresult cuInit(unsigned) {
  return 0;
}
EXPORT CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return 0;
}
EXPORT CUresult cuDeviceGetCount(int* n) {
  *n = kCount;
  return 0;
}
EXPORT CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= kCount) return kInvalidDevice;
  *d = ordinal;
  return 0;
}
EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  if (d < 0 || d >= kCount) return kInvalidDevice;
  std::snprintf(name, static_cast<size_t>(len), "Fake GPU on bus %.2s", kBus[d] + 5);
  return 0;
}
// "GPU-00000000-0000-0000-0000-0000000000XX", XX the bus number.
EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* u, CUdevice d) {
  if (d < 0 || d >= kCount) return kInvalidDevice;
  std::memset(u->bytes, 0, sizeof u->bytes);
  u->bytes[15] = kUuidLast[d];
  return 0;
}
EXPORT CUresult cuDeviceGetPCIBusId(char* bus, int len, CUdevice d) {
  if (d < 0 || d >= kCount) return kInvalidDevice;
  std::snprintf(bus, static_cast<size_t>(len), "%s", kBus[d]);
  return 0;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  *bytes = size_t{80} << 30;
  return 0;
}
}
