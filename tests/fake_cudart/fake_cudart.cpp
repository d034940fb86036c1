// The few CUDA runtime calls select_device makes, answered from
// MUSTER_FAKE_CUDA_UUIDS (the devices' UUIDs, comma-separated, in the order
// this fake CUDA numbers them), so that its UUID check runs on a machine
// without a GPU. Preloaded (LD_PRELOAD) into test_select_device: the
// dynamic linker finds these before libcudart's. Built against CUDA's own
// header, so cudaDeviceProp's layout is the real one.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::vector<std::string> uuids() {
  std::vector<std::string> out;
  const char* env = std::getenv("MUSTER_FAKE_CUDA_UUIDS");
  std::string s = env ? env : "";
  for (size_t at = 0; at < s.size();) {
    size_t comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// "GPU-6b1e2c3d-0000-4000-8000-000000000004" -> 16 bytes.
void to_bytes(const std::string& uuid, char* bytes) {
  std::string hex;
  for (char c : uuid.substr(4))
    if (c != '-') hex += c;
  for (size_t i = 0; i < 16 && 2 * i + 1 < hex.size(); ++i)
    bytes[i] = static_cast<char>(std::strtoul(hex.substr(2 * i, 2).c_str(), nullptr, 16));
}

}  // namespace

extern "C" {

cudaError_t cudaSetDevice(int device) {
  return device >= 0 && static_cast<size_t>(device) < uuids().size() ? cudaSuccess
                                                                     : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  auto all = uuids();
  if (device < 0 || static_cast<size_t>(device) >= all.size()) return cudaErrorInvalidDevice;
  std::memset(prop, 0, sizeof *prop);
  std::strcpy(prop->name, "fake CUDA device");
  to_bytes(all[static_cast<size_t>(device)], prop->uuid.bytes);
  return cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaErrorInvalidDevice ? "invalid device ordinal (fake CUDA runtime)"
                                     : "error (fake CUDA runtime)";
}

// libmuster checks that the runtime it found is the major version its GPU
// helpers were built for: this fake is built with the same headers.
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

}  // extern "C"
