// Bit-exact reimplementation of torch.utils.data.distributed.DistributedSampler (checked against
// torch 1.13), so muster can hand every rank exactly the indices a PyTorch job would iterate.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace muster {

struct ShardSpec {
  uint64_t dataset_size = 0;
  uint64_t epoch = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
  uint32_t num_replicas = 1;
  uint32_t rank = 0;
  // Resumption: how much of the epoch's unpadded permutation `perm` (torch's order) is already
  // used, 0..dataset_size. The ranks then share remaining = perm[consumed:] the way torch shares
  // the whole epoch: padded by cycling (or truncated with drop_last) to a multiple of
  // num_replicas, rank r taking remaining[r::num_replicas]. 0 is torch's DistributedSampler.
  uint64_t consumed = 0;
};

// `consumed` after every one of `world` ranks used `per_rank` indices of a pass that began at
// `start`: min(dataset_size, start + per_rank * world), saturating.
uint64_t consumed_after(uint64_t dataset_size, uint64_t start, uint64_t per_rank, uint32_t world);

// The permutation torch.randperm(n, generator=manual_seed(seed)) produces (seed already includes
// epoch). Only the low 32 bits of `seed` matter, exactly as in torch.
std::vector<int64_t> torch_randperm(uint64_t n, uint64_t seed);
// The same permutation into a caller's buffer of n uint32 (n <= 2^32): half the memory traffic of
// the int64 form, ~1.4x faster at n = 10M. Used by musterd's shard cache. Once `*stop` is set
// (from another thread) it returns within a few hundred steps, `out` unfinished: musterd's worker
// stops a 2^28-sample shuffle (seconds) when the daemon exits.
void torch_randperm_u32(uint32_t* out, uint64_t n, uint64_t seed,
                        const std::atomic<bool>* stop = nullptr);

// Number of indices each rank gets (torch's num_samples, of what remains after `consumed`).
uint64_t shard_size(const ShardSpec& spec);

// This rank's indices given the full permutation (or empty `perm` when !shuffle; then arange is
// implied without allocating).
std::vector<int64_t> shard_from_permutation(const std::vector<int64_t>& perm,
                                            const ShardSpec& spec);

// Convenience: computes the permutation (if shuffle) and the shard.
std::vector<int64_t> shard_indices(const ShardSpec& spec);

// Same output stream as std::mt19937 (the engine behind torch's CPU generator), but it tempers a
// whole state block at once; std::mt19937's per-call work was ~4x slower for large shuffles.
class Mt19937 {
 public:
  explicit Mt19937(uint32_t seed);

  uint32_t operator()() {
    if (pos_ == kStateSize) refill();
    return block_[pos_++];
  }

 private:
  static constexpr int kStateSize = 624;
  void refill();

  std::array<uint32_t, kStateSize> state_;
  std::array<uint32_t, kStateSize> block_;
  int pos_ = kStateSize;
};

}  // namespace muster
