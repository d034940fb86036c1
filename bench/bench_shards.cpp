// Sampler shards from musterd versus torch's DistributedSampler (~0.48 s per
// rank for n = 10,000,000 on the reference machine: each rank shuffles the
// whole dataset itself).
//
// Usage: bench_shards PATH/TO/musterd [runs]
// Starts a private musterd in a mkdtemp runtime directory and, per run, has
// the ranks of a job (one thread and one Client each) fetch their shard of
// n = 10 M, shuffle on, all at once, for a fresh epoch (so every run computes
// a new permutation in the daemon). Prints the median over runs of:
//   shards_10M_8ranks      8 ranks; per-rank time = wall time from the
//                          common start until the last rank holds its shard,
//                          divided by 8 (the node's cost per rank, comparable
//                          to torch's per-rank cost since torch's ranks each
//                          do the whole shuffle);
//   shards_10M_1rank_first latency of the first of those 8 to hold its
//                          shard, from the same start; it includes the
//                          permutation;
//   shards_10M_resumed_6ranks  the same per-rank time for 6 ranks resuming
//                          the epoch at consumed = 5 M (issue #24);
//   ping_during_10M_permutation  the slowest ping that another client sent
//                          while one rank awaited a shard of a fresh epoch
//                          (a ping every ~millisecond; median_s: their
//                          median), beside floor_s = the median ping of an
//                          idle daemon: a loop that computed the permutation
//                          itself kept such a ping waiting ~the whole
//                          shuffle.
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

using Ranks = std::vector<std::unique_ptr<muster::Client>>;

Ranks join(const std::string& endpoint, const std::string& job, uint32_t n) {
  Ranks ranks;
  for (uint32_t r = 0; r < n; ++r) {
    ranks.push_back(std::make_unique<muster::Client>(muster::ClientOptions{endpoint}));
    ranks.back()->join({job, n, false, static_cast<int>(r)});
  }
  return ranks;
}

struct Fetched {
  double per_rank = 0;  // until the last rank holds its shard, over the ranks
  double first = 0;     // until the first does
  std::vector<std::vector<int64_t>> shards;
};

// Every rank fetches its shard of `o` from its own thread, all released at once.
Fetched fetch_all(Ranks& ranks, const muster::Client::ShardOptions& o) {
  const size_t n = ranks.size();
  Fetched f;
  f.shards.resize(n);
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  std::vector<Clock::time_point> done(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return go; });
      }
      try {
        f.shards[r] = ranks[r]->sampler_shard(o);
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
  for (size_t r = 0; r < n; ++r)
    if (!errors[r].empty())
      throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[r]);
  f.per_rank =
      seconds(*std::max_element(done.begin(), done.end()) - start) / static_cast<double>(n);
  f.first = seconds(*std::min_element(done.begin(), done.end()) - start);
  return f;
}

// Not timed: the shards of the first and last rank must be torch's.
void check(const Fetched& f, const muster::Client::ShardOptions& o) {
  muster::ShardSpec spec;
  spec.dataset_size = o.dataset_size;
  spec.epoch = o.epoch;
  spec.seed = o.seed;
  spec.consumed = o.consumed;
  spec.num_replicas = static_cast<uint32_t>(f.shards.size());
  for (uint32_t r = 0; r < spec.num_replicas; r += spec.num_replicas - 1) {
    spec.rank = r;
    if (f.shards[r] != muster::shard_indices(spec))
      throw std::runtime_error("rank " + std::to_string(r) +
                               "'s shard differs from shard_indices()");
  }
}

struct Pings {
  double worst = 0;  // the slowest ping sent while the shard was awaited
  std::vector<double> all;
};

// One rank asks for the shard of a fresh epoch while another client pings.
Pings ping_while_computing(muster::Client& rank, muster::Client& other, uint64_t epoch) {
  std::atomic<bool> done{false};
  std::string error;
  std::thread asker([&] {
    try {
      // The last 1,000 indices: the whole permutation, but a reply that
      // takes the loop no time to write (10 M indices would take ~10 ms).
      rank.sampler_shard({kN, epoch, kSeed, true, false, kN - 1000});
    } catch (const std::exception& e) {
      error = e.what();
    }
    done = true;
  });
  Pings p;
  while (!done) {
    auto t0 = Clock::now();
    other.ping();  // sent while the shard was awaited, however late it comes back
    p.all.push_back(seconds(Clock::now() - t0));
    p.worst = std::max(p.worst, p.all.back());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  asker.join();
  if (!error.empty()) throw std::runtime_error(error);
  return p;
}

double idle_ping(muster::Client& c) {
  std::vector<double> v;
  for (int i = 0; i < 101; ++i) {
    auto t0 = Clock::now();
    c.ping();
    v.push_back(seconds(Clock::now() - t0));
  }
  return median(v);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH/TO/musterd [runs]\n", argv[0]);
    return 2;
  }
  const int runs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  try {
    muster::bench::PrivateDaemon d(argv[1]);
    Ranks eight = join(d.endpoint(), "bench", 8);
    Ranks six = join(d.endpoint(), "bench-resumed", 6);
    Ranks one = join(d.endpoint(), "bench-ping", 1);
    muster::Client pinger(muster::ClientOptions{d.endpoint()});
    std::vector<double> per_rank, first, resumed, worst_ping, pings;
    for (int run = 0; run < runs; ++run) {
      const auto epoch = static_cast<uint64_t>(run);
      muster::Client::ShardOptions o{kN, epoch, kSeed, true, false};
      auto f = fetch_all(eight, o);
      per_rank.push_back(f.per_rank);
      first.push_back(f.first);
      if (run == runs - 1) check(f, o);
      o.consumed = kN / 2;
      f = fetch_all(six, o);
      resumed.push_back(f.per_rank);
      if (run == runs - 1) check(f, o);
      auto p = ping_while_computing(*one[0], pinger, epoch);
      worst_ping.push_back(p.worst);
      pings.insert(pings.end(), p.all.begin(), p.all.end());
    }
    const double idle = idle_ping(pinger);
    for (auto* ranks : {&eight, &six, &one})
      for (auto& c : *ranks) c->leave();
    std::printf("bench shards_10M_8ranks muster_s=%.4f\n", median(per_rank));
    std::printf("bench shards_10M_1rank_first muster_s=%.4f\n", median(first));
    std::printf("bench shards_10M_resumed_6ranks muster_s=%.4f\n", median(resumed));
    std::printf(
        "bench ping_during_10M_permutation muster_s=%.6f floor_s=%.6f median_s=%.6f pings=%zu\n",
        median(worst_ping), idle, pings.empty() ? 0.0 : median(pings), pings.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_shards: %s\n", e.what());
    return 1;
  }
}
