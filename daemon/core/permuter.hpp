// Where State's sampler permutations are computed. The daemon hands them to
// a worker thread (server/permute_thread.hpp), so that a 10 M-sample
// randperm (~0.1 s; seconds at the 2^28 cap) does not stall every other
// request; the fuzzers and unit tests, which drive State without a loop,
// get InlinePermuter, which computes at once, so their replies come from
// the very call that asked. Either way State hands out at most one
// computation at a time (ShardWaits) and collects it on its own thread.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "sampler/sampler.hpp"

namespace muster::daemon {

class Permuter {
 public:
  struct Done {
    uint64_t ticket = 0;
    // torch's randperm(n) for the seed, n entries; null when it could not
    // be computed (no memory for it).
    std::unique_ptr<uint32_t[]> perm;
  };
  virtual ~Permuter() = default;
  // Starts torch's randperm(n) for `seed` (n <= 2^32); take() returns it.
  virtual void start(uint64_t ticket, uint64_t n, uint64_t seed) = 0;
  // The computations finished since the last call.
  virtual std::vector<Done> take() = 0;
};

// Computes in start(), on the caller's thread.
class InlinePermuter final : public Permuter {
 public:
  void start(uint64_t ticket, uint64_t n, uint64_t seed) override {
    Done d{ticket, nullptr};
    try {
      d.perm = std::make_unique_for_overwrite<uint32_t[]>(n);
      torch_randperm_u32(d.perm.get(), n, seed);
    } catch (const std::bad_alloc&) {
      d.perm.reset();
    }
    done_.push_back(std::move(d));
  }
  std::vector<Done> take() override { return std::exchange(done_, {}); }

 private:
  std::vector<Done> done_;
};

}  // namespace muster::daemon
