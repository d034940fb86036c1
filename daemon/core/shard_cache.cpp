#include "core/shard_cache.hpp"

#include "log.hpp"
#include "muster/error.hpp"
#include "sampler/sampler.hpp"

namespace muster::daemon {

namespace {

std::string mib(uint64_t bytes) {
  return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB";
}

template <class V>
size_t oldest(const V& v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i].last_used < v[best].last_used) best = i;
  return best;
}

}  // namespace

const uint32_t* ShardCache::permutation(const std::string& job, uint64_t generation, uint64_t n,
                                        uint64_t seed) {
  auto& perms = by_job_[job];
  Permutation* hit = nullptr;
  for (auto& p : perms)
    if (p.generation == generation && p.n == n && p.seed == seed) hit = &p;
  if (!hit) {
    const uint64_t bytes = n * sizeof(uint32_t);  // n <= 2^28 < 2^32 past the check below
    if (bytes > kBudgetBytes)
      throw Error(ErrorCode::kTooLarge, "a shuffled dataset of " + std::to_string(n) +
                                            " samples needs a " + mib(bytes) +
                                            " permutation, over musterd's " + mib(kBudgetBytes) +
                                            " limit; shuffle in the client instead");
    make_room(perms, bytes);
    log::info("job=" + job + " computing sampler permutation n=" + std::to_string(n) +
              " seed+epoch=" + std::to_string(seed));
    auto perm = std::make_unique_for_overwrite<uint32_t[]>(n);
    torch_randperm_u32(perm.get(), n, seed);
    perms.push_back({generation, n, seed, std::move(perm), 0});
    bytes_ += bytes;
    hit = &perms.back();
  }
  hit->last_used = ++clock_;
  return hit->perm.get();
}

void ShardCache::evict(std::vector<Permutation>& v, size_t i) {
  bytes_ -= v[i].n * sizeof(uint32_t);
  v.erase(v.begin() + static_cast<ptrdiff_t>(i));
}

void ShardCache::make_room(std::vector<Permutation>& perms, uint64_t bytes) {
  while (perms.size() >= kPermsPerJob) evict(perms, oldest(perms));
  while (bytes_ + bytes > kBudgetBytes) {
    std::vector<Permutation>* victim = nullptr;
    size_t at = 0;
    for (auto& [id, v] : by_job_) {
      if (v.empty()) continue;
      size_t i = oldest(v);
      if (!victim || v[i].last_used < (*victim)[at].last_used) victim = &v, at = i;
    }
    if (!victim) break;
    evict(*victim, at);
  }
}

void ShardCache::drop(const std::string& job) {
  auto it = by_job_.find(job);
  if (it == by_job_.end()) return;
  for (const auto& p : it->second) bytes_ -= p.n * sizeof(uint32_t);
  by_job_.erase(it);
}

}  // namespace muster::daemon
