// GPU path, where a GPU is: each local GPU is a rank (a thread with its own
// Client), the communicator comes from a brokered NCCL id, and sync_model
// broadcasts and averages device buffers. Exits 77 (skipped) without a GPU.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <thread>
#include <vector>

#include "muster/gpu.hpp"
#include "support/process.hpp"

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIP: no CUDA device on this machine\n");
    return 77;
  }
  int world = std::min(n, 4);
  muster::test::TestDaemon daemon;
  std::vector<int> ok(world, 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        muster::Client c({daemon.endpoint()});
        auto me = c.join({"gpu-test", static_cast<uint32_t>(world), true, r});
        muster::gpu::select_device(me);
        ncclComm_t comm = muster::gpu::init_communicator(c);
        const size_t count = 1 << 20;
        float *param, *buf;
        cudaMalloc(&param, count * sizeof(float));
        cudaMalloc(&buf, count * sizeof(float));
        std::vector<float> host(count, static_cast<float>(r + 1));
        cudaMemcpy(param, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
        cudaMemcpy(buf, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
        // parameters averaged, buffers broadcast from rank 0
        muster::gpu::sync_model(
            comm, {{param, count, ncclFloat32, true}, {buf, count, ncclFloat32, false}}, true,
            false);
        std::vector<float> p(count), b(count);
        cudaMemcpy(p.data(), param, count * sizeof(float), cudaMemcpyDeviceToHost);
        cudaMemcpy(b.data(), buf, count * sizeof(float), cudaMemcpyDeviceToHost);
        float avg = (world + 1) / 2.0f;
        bool good = true;
        for (size_t i = 0; i < count; ++i) good = good && p[i] == avg && b[i] == 1.0f;
        ok[r] = good ? 1 : 0;
        if (!good) std::printf("rank %d: wrong values p=%f b=%f\n", r, p[0], b[0]);
        ncclCommDestroy(comm);
        cudaFree(param);
        cudaFree(buf);
      } catch (const std::exception& e) {
        std::printf("rank %d: %s\n", r, e.what());
      }
    });
  for (auto& t : ranks) t.join();
  int passed = 0;
  for (int v : ok) passed += v;
  std::printf("%d passed, %d failed\n", passed, world - passed);
  return passed == world ? 0 : 1;
}
