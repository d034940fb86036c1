// Benchmark of Client::broadcast: 256 MiB from rank 0 to 3 other ranks of
// one job (threads of this process, one Client each) through a private
// musterd, against the floor of one warm 256 MiB memcpy. Prints:
//   bench broadcast_256MiB_4ranks muster_s=X       (median of 5 runs; the
//                                                   default path: root's pool,
//                                                   streamed)
//   bench broadcast_256MiB_4ranks_pool muster_s=X  (MUSTER_BCAST=pool: root's
//                                                   pool, written whole first)
//   bench broadcast_256MiB_4ranks_shm muster_s=X   (MUSTER_BCAST=shm: a fresh
//                                                   segment per call)
//   bench memcpy_256MiB floor_s=Y                  (median of 5 runs)
// Usage: bench_broadcast MUSTERD   (the musterd binary; or $MUSTERD)
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "muster/client.hpp"
#include "private_daemon.hpp"
#include "timing.hpp"

namespace {

using muster::bench::Clock;
using muster::bench::median;
using muster::bench::seconds;
constexpr size_t kSize = size_t{256} << 20;
constexpr uint32_t kRanks = 4;
constexpr int kRuns = 5;

double bench_broadcast(const muster::bench::PrivateDaemon& d, const std::string& job) {
  std::vector<std::vector<uint8_t>> bufs(kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) {
    bufs[r].resize(kSize);  // touched: a model's parameters are resident
    if (r == 0)
      for (size_t i = 0; i < kSize; i += 8) {
        uint64_t v = i * 0x9E3779B97F4A7C15ULL;
        std::memcpy(&bufs[r][i], &v, 8);
      }
  }
  std::barrier sync(kRanks);
  std::vector<double> times;
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      try {
        muster::Client c({d.endpoint()});
        c.join({job, kRanks, false, static_cast<int>(r)});
        for (int run = 0; run <= kRuns; ++run) {  // run 0 warms up
          sync.arrive_and_wait();
          auto t0 = Clock::now();
          c.broadcast(bufs[r].data(), kSize, 0);
          sync.arrive_and_wait();
          if (r == 0 && run > 0) times.push_back(seconds(Clock::now() - t0));
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
        sync.arrive_and_drop();
      }
    });
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < kRanks; ++r)
    if (!errors[r].empty())
      throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[r]);
  for (uint32_t r = 1; r < kRanks; ++r)
    if (bufs[r] != bufs[0]) throw std::runtime_error("rank " + std::to_string(r) + " differs");
  return median(times);
}

double bench_memcpy() {
  std::vector<uint8_t> a(kSize, 1), b(kSize, 2);
  std::vector<double> times;
  for (int run = 0; run <= kRuns; ++run) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), kSize);
    if (run > 0) times.push_back(seconds(Clock::now() - t0));
    a[run] = static_cast<uint8_t>(b[run + 1] + 1);  // keep the copies observable
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  const char* binary = argc > 1 ? argv[1] : std::getenv("MUSTERD");
  if (!binary) {
    std::fprintf(stderr, "usage: %s MUSTERD (path of the musterd binary)\n", argv[0]);
    return 2;
  }
  try {
    muster::bench::PrivateDaemon d(binary);
    ::setenv("MUSTER_BCAST", "shm", 1);
    double shm = bench_broadcast(d, "bench-shm");
    ::setenv("MUSTER_BCAST", "pool", 1);
    double pool = bench_broadcast(d, "bench-pool");
    ::unsetenv("MUSTER_BCAST");
    double t = bench_broadcast(d, "bench");
    double floor = bench_memcpy();
    std::printf("bench broadcast_256MiB_4ranks muster_s=%.4f\n", t);
    std::printf("bench broadcast_256MiB_4ranks_pool muster_s=%.4f\n", pool);
    std::printf("bench broadcast_256MiB_4ranks_shm muster_s=%.4f\n", shm);
    std::printf("bench memcpy_256MiB floor_s=%.4f\n", floor);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_broadcast: %s\n", e.what());
    return 1;
  }
  return 0;
}
