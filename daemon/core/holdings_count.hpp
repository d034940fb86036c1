// What everyone holds of the daemon's memory and state (core/ceilings.hpp):
// the global ceilings' and the fair shares' measure, read before a store or
// a parked wait grows. Counted over the jobs' stores, the global stores of
// the jobs coordinated here (through ClusterSide) and the parked requests.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>

#include "core/ceilings.hpp"
#include "core/cluster_side.hpp"
#include "core/job_table.hpp"
#include "core/store.hpp"

namespace muster::daemon {

class HoldingsCount {
 public:
  HoldingsCount(const JobTable& jobs, const Store& store, const ClusterSide& cluster)
      : jobs_(jobs), store_(store), cluster_(cluster) {}

  // What everyone holds, and uid. The stores' part is the last count plus
  // the growth allowed since (grew): an upper bound, as stores also shrink;
  // counted anew when `exact`, when a job came or went, and at least once a
  // second (a count walks every job: 65 us with 4,096 jobs, bench_ceilings).
  // Parked requests are counted as they park.
  Holdings of(int64_t uid, bool exact = false) const;
  void grew(int64_t uid, uint64_t memory, uint64_t state) const;

 private:
  const JobTable& jobs_;
  const Store& store_;
  const ClusterSide& cluster_;
  // The last count of the stores' holdings per uid.
  struct Counted {
    bool valid = false;
    uint64_t job_changes = 0;
    size_t rounds = 0;
    Clock::time_point at{};
    std::unordered_map<int64_t, std::pair<uint64_t, uint64_t>> stores;  // memory, state
    uint64_t memory = 0, state = 0;
  };
  mutable Counted counted_;
};

}  // namespace muster::daemon
