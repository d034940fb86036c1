// One rank of the GPU check (scripts/gpu-bundle.sh's run.sh), started by
// `muster run` (one per GPU): it joins from the environment muster run
// gives, opens its leased GPU (select_device checks the UUID), builds the
// communicator from ids muster brokers — ncclCommInitRankScalable with N ids
// (argv[1], default 2), or ncclCommInitRank when N is 1 — and all-reduces
// rank+1 over 16 MiB of floats OUT OF PLACE into a buffer filled with NaN
// first: every element equal to 1 + ... + world proves NCCL ran (an
// in-place all-reduce over one rank would leave the right values whether
// NCCL ran or not). Prints one line with the leased and the opened GPU's
// UUID; exits 1 on a wrong sum, 2 on an error.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "muster/error.hpp"
#include "muster/gpu.hpp"

namespace {

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

std::string opened_uuid(int device) {
  cudaDeviceProp prop{};
  cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  std::string out = "GPU";
  static const int groups[] = {4, 2, 2, 2, 6};
  size_t at = 0;
  char hex[3];
  for (int g : groups) {
    out += '-';
    for (int i = 0; i < g; ++i, ++at) {
      std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(prop.uuid.bytes[at]));
      out += hex;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t ids = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 2;
  try {
    muster::Client client;
    auto me = client.join_from_env();
    int device = muster::gpu::select_device(me);
    ncclComm_t comm = ids == 1 ? muster::gpu::init_communicator(client)
                               : muster::gpu::init_communicator_scalable(client, ids);
    const size_t count = size_t{4} << 20;
    std::vector<float> host(count, static_cast<float>(me.rank + 1));
    float* in = nullptr;
    float* out = nullptr;
    cuda(cudaMalloc(&in, count * sizeof(float)), "cudaMalloc");
    cuda(cudaMalloc(&out, count * sizeof(float)), "cudaMalloc");
    cuda(cudaMemcpy(in, host.data(), count * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda(cudaMemset(out, 0xff, count * sizeof(float)), "cudaMemset");  // all NaN
    if (ncclAllReduce(in, out, count, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
      throw std::runtime_error("ncclAllReduce");
    cuda(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
    cuda(cudaMemcpy(host.data(), out, count * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
    float want = static_cast<float>(me.world_size) * static_cast<float>(me.world_size + 1) / 2;
    size_t wrong = 0;
    for (float v : host) wrong += std::isnan(v) || v != want;
    std::printf("rank %u of %u on GPU %d leased %s opened %s: all-reduce over %u ids %s\n", me.rank,
                me.world_size, device, me.device_uuid.c_str(), opened_uuid(device).c_str(), ids,
                wrong ? "WRONG" : "ok");
    cudaFree(in);
    cudaFree(out);
    ncclCommDestroy(comm);
    return wrong ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_allreduce_worker: %s\n", e.what());
    return 2;
  }
}
