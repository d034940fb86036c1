// Wire-up: N ranks join a job, get a 128-byte id from rank 0 and pass a
// barrier — what torch's TCPStore does in init_process_group, measured the
// same way as ../shared/anchors/torch_store_rdzv.py (ranks are threads,
// timed from a common start until every rank is through).
//   bench_wireup MUSTERD [N...]
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "muster/broadcast.hpp"
#include "private_daemon.hpp"
#include "timing.hpp"

using namespace std::chrono;

namespace {

double wireup(const std::string& endpoint, uint32_t n, int run) {
  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  std::atomic<uint32_t> failures{0};
  std::string job = "wireup-" + std::to_string(n) + "-" + std::to_string(run);
  std::vector<std::thread> ranks;
  std::atomic<uint32_t> ready{0};
  for (uint32_t r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      try {
        muster::Client c({endpoint});  // connecting is like TCPStore's constructor: untimed
        ++ready;
        {
          std::unique_lock lk(m);
          cv.wait(lk, [&] { return go; });
        }
        c.join({job, n, false, static_cast<int>(r)});
        auto id = muster::nccl_unique_id(c, "world", seconds(60));
        if (id.size() != 128) ++failures;
        c.barrier("wired", seconds(60));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %u: %s\n", r, e.what());
        ++failures;
      }
    });
  while (ready < n) std::this_thread::sleep_for(milliseconds(1));
  std::this_thread::sleep_for(milliseconds(100));
  auto t0 = steady_clock::now();
  {
    std::lock_guard lk(m);
    go = true;
  }
  cv.notify_all();
  for (auto& t : ranks) t.join();
  double s = duration<double>(steady_clock::now() - t0).count();
  if (failures) throw std::runtime_error("some ranks failed");
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MUSTERD [N...]\n", argv[0]);
    return 2;
  }
  std::vector<uint32_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(static_cast<uint32_t>(std::atoi(argv[i])));
  if (sizes.empty()) sizes = {8, 64, 256};
  muster::bench::PrivateDaemon daemon(argv[1]);
  for (auto n : sizes) {
    std::vector<double> runs;
    for (int run = 0; run < 5; ++run) runs.push_back(wireup(daemon.endpoint(), n, run));
    std::printf("bench wireup_%u muster_s=%.4f\n", n, muster::bench::median(runs));
    std::fflush(stdout);
  }
  return 0;
}
