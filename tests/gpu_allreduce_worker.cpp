// One rank of scripts/gpu-check.sh's NCCL check, started by `muster run`
// (one per GPU): it joins from the environment muster run gives, opens its
// leased GPU (select_device checks the UUID), builds the communicator with
// ncclCommInitRankScalable from ids muster brokers, all-reduces rank+1 over
// 16 MiB of floats, and checks every element is the sum 1 + ... + world.
// Prints one line; exits 1 on a wrong sum, 2 on an error.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "muster/error.hpp"
#include "muster/gpu.hpp"

int main(int argc, char** argv) {
  uint32_t ids = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 2;
  try {
    muster::Client client;
    auto me = client.join_from_env();
    muster::gpu::select_device(me);
    ncclComm_t comm = muster::gpu::init_communicator_scalable(client, ids);
    const size_t count = size_t{4} << 20;
    std::vector<float> host(count, static_cast<float>(me.rank + 1));
    float* buf = nullptr;
    if (cudaMalloc(&buf, count * sizeof(float)) != cudaSuccess)
      throw std::runtime_error("cudaMalloc");
    cudaMemcpy(buf, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
    if (ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
      throw std::runtime_error("ncclAllReduce");
    cudaStreamSynchronize(nullptr);
    cudaMemcpy(host.data(), buf, count * sizeof(float), cudaMemcpyDeviceToHost);
    float want = static_cast<float>(me.world_size) * static_cast<float>(me.world_size + 1) / 2;
    size_t wrong = 0;
    for (float v : host) wrong += v != want;
    std::printf("rank %u of %u on GPU %d (%s): all-reduce over %u ids %s\n", me.rank, me.world_size,
                me.device, me.device_uuid.c_str(), ids, wrong ? "WRONG" : "ok");
    cudaFree(buf);
    ncclCommDestroy(comm);
    return wrong ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_allreduce_worker: %s\n", e.what());
    return 2;
  }
}
