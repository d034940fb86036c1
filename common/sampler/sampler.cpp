#include "sampler/sampler.hpp"

#include <algorithm>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

namespace muster {

Mt19937::Mt19937(uint32_t seed) {
  state_[0] = seed;
  for (int i = 1; i < kStateSize; ++i) {
    const uint32_t prev = state_[i - 1];
    state_[i] = 1812433253u * (prev ^ (prev >> 30)) + static_cast<uint32_t>(i);
  }
}

void Mt19937::refill() {
  constexpr int kShift = 397;
  // Branch-free twist so the compiler can vectorise the three straight runs.
  auto twist = [](uint32_t hi, uint32_t lo, uint32_t far) {
    const uint32_t y = (hi & 0x80000000u) | (lo & 0x7fffffffu);
    return far ^ (y >> 1) ^ ((0u - (y & 1u)) & 0x9908b0dfu);
  };
  int i = 0;
  for (; i < kStateSize - kShift; ++i) {
    state_[i] = twist(state_[i], state_[i + 1], state_[i + kShift]);
  }
  for (; i < kStateSize - 1; ++i) {
    state_[i] = twist(state_[i], state_[i + 1], state_[i + kShift - kStateSize]);
  }
  state_[i] = twist(state_[i], state_[0], state_[kShift - 1]);
  for (int k = 0; k < kStateSize; ++k) {
    uint32_t y = state_[k];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    block_[k] = y;
  }
  pos_ = 0;
}

namespace {

constexpr uint64_t kMaxIndex = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

void validate(const ShardSpec& spec) {
  if (spec.num_replicas == 0) {
    throw std::invalid_argument("ShardSpec.num_replicas must be at least 1.");
  }
  if (spec.rank >= spec.num_replicas) {
    throw std::invalid_argument("ShardSpec.rank " + std::to_string(spec.rank) +
                                " must be less than num_replicas " +
                                std::to_string(spec.num_replicas) + ".");
  }
  if (spec.dataset_size > kMaxIndex) {
    throw std::invalid_argument("ShardSpec.dataset_size does not fit torch's int64 indices.");
  }
  if (spec.consumed > spec.dataset_size) {
    throw std::invalid_argument("ShardSpec.consumed " + std::to_string(spec.consumed) +
                                " is over dataset_size " + std::to_string(spec.dataset_size) + ".");
  }
}

// torch's randperm_cpu: forward Fisher-Yates drawing one 32-bit mt19937 output per step, reduced
// with a biased modulo. Unlike torch 2.x, 1.13 keeps 32-bit draws at n >= 2^32 / 20 (checked at
// n = 214748364 against real torch).
// The swap targets do not depend on the array, so a batch of them is computed up front and
// prefetched: the swaps are cache/TLB-miss bound and this overlaps the misses.
template <typename T>
void torch_shuffle(T* data, uint64_t n, uint64_t seed, const std::atomic<bool>* stop = nullptr) {
  for (uint64_t i = 0; i < n; ++i) data[i] = static_cast<T>(i);
  if (n < 2) return;
  Mt19937 gen(static_cast<uint32_t>(seed));  // manual_seed keeps only the low 32 bits.
  constexpr uint64_t kBatch = 512;
  constexpr uint64_t kLookahead = 16;
  uint64_t targets[kBatch];
  const uint64_t steps = n - 1;
  for (uint64_t base = 0; base < steps; base += kBatch) {
    if (stop && stop->load(std::memory_order_relaxed)) return;
    const uint64_t len = std::min(kBatch, steps - base);
    for (uint64_t k = 0; k < len; ++k) {
      const uint64_t i = base + k;
      const uint64_t remaining = n - i;
      const uint32_t draw = gen();
      // A 32-bit draw is already below any remaining count >= 2^32; 32-bit division is cheaper.
      targets[k] = i + (remaining > 0xffffffffu ? draw : draw % static_cast<uint32_t>(remaining));
    }
    for (uint64_t k = 0; k < std::min(kLookahead, len); ++k) {
      __builtin_prefetch(data + targets[k], 1);
    }
    for (uint64_t k = 0; k < len; ++k) {
      if (k + kLookahead < len) __builtin_prefetch(data + targets[k + kLookahead], 1);
      std::swap(data[base + k], data[targets[k]]);
    }
  }
}

// DistributedSampler pads by cycling the base list, so padded position p of the m remaining
// entries holds remaining[p % m]; drop_last keeps total_size <= m, where that is just
// remaining[p]. remaining[q] is base(consumed + q).
template <typename Lookup>
std::vector<int64_t> gather_shard(const ShardSpec& spec, Lookup base) {
  const uint64_t count = shard_size(spec);
  const uint64_t m = spec.dataset_size - spec.consumed;
  std::vector<int64_t> out;
  out.reserve(count);
  uint64_t pos = spec.rank;
  for (uint64_t k = 0; k < count; ++k, pos += spec.num_replicas) {
    out.push_back(base(spec.consumed + (pos < m ? pos : pos % m)));
  }
  return out;
}

}  // namespace

std::vector<int64_t> torch_randperm(uint64_t n, uint64_t seed) {
  if (n > kMaxIndex) throw std::invalid_argument("torch_randperm: n does not fit int64 indices.");
  std::vector<int64_t> perm(n);
  torch_shuffle(perm.data(), n, seed);
  return perm;
}

void torch_randperm_u32(uint32_t* out, uint64_t n, uint64_t seed, const std::atomic<bool>* stop) {
  if (n > (uint64_t{1} << 32)) throw std::invalid_argument("torch_randperm_u32: n is over 2^32.");
  torch_shuffle(out, n, seed, stop);
}

uint64_t consumed_after(uint64_t dataset_size, uint64_t start, uint64_t per_rank, uint32_t world) {
  if (start >= dataset_size) return dataset_size;
  const uint64_t left = dataset_size - start;
  if (world == 0 || per_rank >= left / world + 1) return dataset_size;  // also avoids overflow
  return std::min(dataset_size, start + per_rank * world);
}

uint64_t shard_size(const ShardSpec& spec) {
  validate(spec);
  const uint64_t n = spec.dataset_size - spec.consumed;
  const uint64_t world = spec.num_replicas;
  // torch: drop_last ? ceil((n - world) / world) : ceil(n / world). For uneven n the former is
  // floor(n / world), and it is 0 when n < world because the quotient lies in (-1, 0).
  if (spec.drop_last) return n / world;
  return n / world + (n % world != 0 ? 1 : 0);
}

std::vector<int64_t> shard_from_permutation(const std::vector<int64_t>& perm,
                                            const ShardSpec& spec) {
  validate(spec);
  if (!spec.shuffle) {
    if (!perm.empty()) {
      throw std::invalid_argument(
          "shard_from_permutation: perm must be empty when shuffle is off.");
    }
    return gather_shard(spec, [](uint64_t p) { return static_cast<int64_t>(p); });
  }
  if (perm.size() != spec.dataset_size) {
    throw std::invalid_argument("shard_from_permutation: perm has " + std::to_string(perm.size()) +
                                " entries but dataset_size is " +
                                std::to_string(spec.dataset_size) + ".");
  }
  return gather_shard(spec, [&perm](uint64_t p) { return perm[p]; });
}

std::vector<int64_t> shard_indices(const ShardSpec& spec) {
  validate(spec);
  if (!spec.shuffle) return shard_from_permutation({}, spec);
  const uint64_t n = spec.dataset_size;
  // torch would raise once seed + epoch reaches 2^64; wrapping keeps the same low 32 bits.
  const uint64_t seed = spec.seed + spec.epoch;
  if (n <= uint64_t{1} << 32) {
    // Half the footprint of int64 makes the shuffle's random swaps markedly cheaper, and only
    // this rank's share is ever widened.
    auto perm = std::make_unique_for_overwrite<uint32_t[]>(n);
    torch_shuffle(perm.get(), n, seed);
    return gather_shard(spec, [&perm](uint64_t p) { return static_cast<int64_t>(perm[p]); });
  }
  return shard_from_permutation(torch_randperm(n, seed), spec);
}

}  // namespace muster
