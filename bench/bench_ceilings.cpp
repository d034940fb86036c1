// What the global ceilings' accounting costs a request that grows a store
// or parks (daemon/core/ceilings.hpp): HoldingsCount::of, as a request asks
// it (the last count plus the growth since: "check") and as an exact count
// that walks the node's jobs and the rounds it coordinates ("count": when a
// job came or went, once a second, and before a refusal). Timed per call
// with 1, 256 and 4,096 jobs of 16 uids, in process (no daemon): the
// median of 5 runs of 20,000 calls each.
#include <cstdio>
#include <string>
#include <vector>

#include "core/state.hpp"
#include "job_id.hpp"
#include "liveness/pidwatch.hpp"
#include "timing.hpp"

using namespace muster;
using namespace muster::daemon;
using muster::bench::Clock;

int main() {
  for (int n : {1, 256, 4096}) {
    PidWatch watch;
    State st({}, watch);
    for (int i = 0; i < n; ++i) {
      Job j;
      j.owner_uid = 1000 + i % 16;
      j.id = job_key(j.owner_uid, "job" + std::to_string(i));
      j.local_world_size = 1;
      j.slots.resize(1);
      j.kv.set("key", std::string(64, 'v'));
      st.restore(std::move(j));
    }
    constexpr int kCalls = 20000;
    uint64_t sink = 0;
    auto per_call = [&](bool exact) {
      std::vector<double> runs;
      for (int r = 0; r < 5; ++r) {
        auto t0 = Clock::now();
        for (int k = 0; k < kCalls; ++k) sink += st.holdings().of(1000 + k % 16, exact).memory_mine;
        runs.push_back(bench::seconds(Clock::now() - t0) / kCalls * 1e6);
      }
      return bench::median(runs);
    };
    const double check = per_call(false), count = per_call(true);
    std::printf("bench ceilings_%d us_per_check=%.3f us_per_count=%.3f (sink %llu)\n", n, check,
                count, static_cast<unsigned long long>(sink % 10));
  }
  return 0;
}
