// Load: C clients (threads of one process, each with its own client and
// connection, joined to one job) hammer the store at once, each doing R
// rounds of set + get of its own key: 2*C*R requests. Timed from a common
// start until every client is through, as run_bench.py times torch's
// TCPStore with the same number of client threads; connecting and joining
// happen before (like TCPStore's constructor). Every reply is checked.
//   bench_load MUSTERD [CLIENTS [ROUNDS]]
// prints: bench load_C muster_s=X requests=N rps=Y
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "private_daemon.hpp"
#include "timing.hpp"

namespace {

void raise_fd_limit(rlim_t want) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rlim_t target = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
  if (rl.rlim_cur < target) {
    rl.rlim_cur = target;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

double load(const std::string& endpoint, uint32_t clients, uint32_t rounds, int run) {
  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  std::atomic<uint32_t> ready{0}, failures{0};
  std::string job = "load-" + std::to_string(clients) + "-" + std::to_string(run);
  std::vector<std::thread> threads;
  threads.reserve(clients);
  for (uint32_t i = 0; i < clients; ++i)
    threads.emplace_back([&, i] {
      try {
        muster::Client c({endpoint, std::chrono::seconds(60)});
        c.join({job, clients, false, static_cast<int>(i)});
        std::string key = "key/" + std::to_string(i);
        std::string value(64, static_cast<char>('a' + i % 26));
        ++ready;
        {
          std::unique_lock lk(m);
          cv.wait(lk, [&] { return go; });
        }
        for (uint32_t r = 0; r < rounds; ++r) {
          value[0] = static_cast<char>('A' + r % 26);
          c.set(key, value);
          if (c.get(key) != value) ++failures;
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "client %u: %s\n", i, e.what());
        ++failures;
        ++ready;
      }
    });
  while (ready < clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t0 = muster::bench::Clock::now();
  {
    std::lock_guard lk(m);
    go = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  double s = muster::bench::seconds(muster::bench::Clock::now() - t0);
  if (failures) throw std::runtime_error(std::to_string(failures.load()) + " client(s) failed");
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MUSTERD [CLIENTS [ROUNDS]]\n", argv[0]);
    return 2;
  }
  uint32_t clients = argc > 2 ? static_cast<uint32_t>(std::atoi(argv[2])) : 1000;
  uint32_t rounds = argc > 3 ? static_cast<uint32_t>(std::atoi(argv[3])) : 10;
  // Two descriptors per client here, one per connection in the daemon
  // (which inherits the limit).
  raise_fd_limit(4 * clients + 1024);
  muster::bench::PrivateDaemon daemon(argv[1]);
  std::vector<double> runs;
  for (int run = 0; run < 5; ++run) runs.push_back(load(daemon.endpoint(), clients, rounds, run));
  double s = muster::bench::median(runs);
  double requests = 2.0 * clients * rounds;
  std::printf("bench load_%u muster_s=%.4f requests=%.0f rps=%.0f\n", clients, s, requests,
              requests / s);
  return 0;
}
