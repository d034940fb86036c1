// Sampler shards from musterd versus torch's DistributedSampler (~0.48 s per
// rank for n = 10,000,000 on the reference machine: each rank shuffles the
// whole dataset itself).
//
// Usage: bench_shards PATH/TO/musterd [runs]
// Starts a private musterd in a mkdtemp runtime directory, joins 8 ranks of
// one job as 8 threads (one Client each) and, per run, has all 8 fetch their
// shard of n = 10 M, shuffle on, for a fresh epoch (so every run computes a
// new permutation in the daemon). Prints the median over runs of:
//   shards_10M_8ranks      per-rank time = wall time from the common start
//                          until the last of the 8 ranks holds its shard,
//                          divided by 8 (the node's cost per rank, comparable
//                          to torch's per-rank cost since torch's ranks each
//                          do the whole shuffle);
//   shards_10M_1rank_first latency of the first rank to hold its shard, from
//                          the same start; it includes the permutation.
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "muster/client.hpp"
#include "private_daemon.hpp"
#include "sampler/sampler.hpp"
#include "timing.hpp"

namespace {

using muster::bench::Clock;
using muster::bench::median;
using muster::bench::seconds;
constexpr uint64_t kN = 10'000'000;
constexpr uint32_t kRanks = 8;
constexpr uint64_t kSeed = 1234;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH/TO/musterd [runs]\n", argv[0]);
    return 2;
  }
  const int runs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  try {
    muster::bench::PrivateDaemon d(argv[1]);
    std::vector<std::unique_ptr<muster::Client>> ranks;
    for (uint32_t r = 0; r < kRanks; ++r) {
      ranks.push_back(std::make_unique<muster::Client>(muster::ClientOptions{d.endpoint()}));
      ranks.back()->join({"bench", kRanks, false, static_cast<int>(r)});
    }

    std::vector<double> per_rank, first;
    std::vector<std::vector<int64_t>> shards(kRanks);
    for (int run = 0; run < runs; ++run) {
      const uint64_t epoch = static_cast<uint64_t>(run);
      std::mutex mu;
      std::condition_variable cv;
      bool go = false;
      std::vector<Clock::time_point> done(kRanks);
      std::vector<std::string> errors(kRanks);
      std::vector<std::thread> threads;
      for (uint32_t r = 0; r < kRanks; ++r)
        threads.emplace_back([&, r] {
          {
            std::unique_lock lk(mu);
            cv.wait(lk, [&] { return go; });
          }
          try {
            shards[r] = ranks[r]->sampler_shard({kN, epoch, kSeed, true, false});
          } catch (const std::exception& e) {
            errors[r] = e.what();
          }
          done[r] = Clock::now();
        });
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // all threads parked
      Clock::time_point start;
      {
        std::lock_guard lk(mu);
        go = true;
        start = Clock::now();
      }
      cv.notify_all();
      for (auto& t : threads) t.join();
      for (uint32_t r = 0; r < kRanks; ++r)
        if (!errors[r].empty())
          throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[r]);
      per_rank.push_back(seconds(*std::max_element(done.begin(), done.end()) - start) / kRanks);
      first.push_back(seconds(*std::min_element(done.begin(), done.end()) - start));
    }

    // Not timed: the last run's shards must be torch's.
    muster::ShardSpec spec;
    spec.dataset_size = kN;
    spec.epoch = static_cast<uint64_t>(runs - 1);
    spec.seed = kSeed;
    spec.num_replicas = kRanks;
    for (uint32_t r = 0; r < kRanks; r += kRanks - 1) {
      spec.rank = r;
      if (shards[r] != muster::shard_indices(spec)) {
        std::fprintf(stderr, "rank %u's shard differs from shard_indices()\n", r);
        return 1;
      }
    }
    for (auto& c : ranks) c->leave();
    std::printf("bench shards_10M_8ranks muster_s=%.4f\n", median(per_rank));
    std::printf("bench shards_10M_1rank_first muster_s=%.4f\n", median(first));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_shards: %s\n", e.what());
    return 1;
  }
}
