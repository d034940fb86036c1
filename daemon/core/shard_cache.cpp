#include "core/shard_cache.hpp"

#include "muster/error.hpp"

namespace muster::daemon {

std::string mib_text(uint64_t bytes) {
  return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB";
}

namespace {

template <class V>
size_t oldest(const V& v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i].last_used < v[best].last_used) best = i;
  return best;
}

}  // namespace

const uint32_t* ShardCache::find(const std::string& job, uint64_t generation, uint64_t n,
                                 uint64_t seed) {
  auto it = by_job_.find(job);
  if (it == by_job_.end()) return nullptr;
  for (auto& p : it->second)
    if (p.generation == generation && p.n == n && p.seed == seed) {
      p.last_used = ++clock_;
      return p.perm.get();
    }
  return nullptr;
}

void ShardCache::check_fits(uint64_t n) {
  const uint64_t bytes = n * sizeof(uint32_t);  // n <= 2^40: no overflow
  if (bytes > kBudgetBytes)
    throw Error(ErrorCode::kTooLarge, "a shuffled dataset of " + std::to_string(n) +
                                          " samples needs a " + mib_text(bytes) +
                                          " permutation, over musterd's " + mib_text(kBudgetBytes) +
                                          " limit; shuffle in the client instead");
}

void ShardCache::reserve(uint64_t n) {
  const uint64_t bytes = n * sizeof(uint32_t);
  make_room(nullptr, bytes);
  reserved_ += bytes;
}

void ShardCache::release(uint64_t n) {
  reserved_ -= n * sizeof(uint32_t);
}

const uint32_t* ShardCache::insert(const std::string& job, uint64_t generation, uint64_t n,
                                   uint64_t seed, std::unique_ptr<uint32_t[]> perm) {
  const uint64_t bytes = n * sizeof(uint32_t);
  auto& perms = by_job_[job];
  make_room(&perms, bytes);
  perms.push_back({generation, n, seed, std::move(perm), ++clock_});
  bytes_ += bytes;
  return perms.back().perm.get();
}

void ShardCache::evict(std::vector<Permutation>& v, size_t i) {
  bytes_ -= v[i].n * sizeof(uint32_t);
  v.erase(v.begin() + static_cast<ptrdiff_t>(i));
}

void ShardCache::make_room(std::vector<Permutation>* perms, uint64_t bytes) {
  if (perms)
    while (perms->size() >= kPermsPerJob) evict(*perms, oldest(*perms));
  while (bytes_ + reserved_ + bytes > kBudgetBytes) {
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
