// The sampler permutations a daemon keeps, per job: one per (generation,
// dataset size, seed + epoch), so that a node's ranks share one randperm.
// Bounded per job (the current epoch and the one before) and in all (1 GiB,
// the one being computed included), least recently used first out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace muster::daemon {

// A size for a refusal's sentence: whole MiB, rounded up ("65 MiB").
std::string mib_text(uint64_t bytes);

class ShardCache {
 public:
  static constexpr size_t kPermsPerJob = 2;                // this epoch and the one before
  static constexpr size_t kBudgetBytes = size_t{1} << 30;  // all jobs together

  // torch's randperm(n) for `seed` in this generation of the job when it is
  // kept (now marked used), else null. The pointer lives until the next
  // insert(), reserve() or drop().
  const uint32_t* find(const std::string& job, uint64_t generation, uint64_t n, uint64_t seed);
  // Throws Error(kTooLarge) when a permutation of n could never fit the budget.
  static void check_fits(uint64_t n);
  // Room for a permutation of n being computed (ShardWaits): the least
  // recently used ones go until it fits beside them; release() gives the
  // room back once it is computed or dropped.
  void reserve(uint64_t n);
  void release(uint64_t n);
  // Keeps a computed permutation and returns it; its reservation is to be
  // released first.
  const uint32_t* insert(const std::string& job, uint64_t generation, uint64_t n, uint64_t seed,
                         std::unique_ptr<uint32_t[]> perm);
  // Forgets a job's permutations (the job ended).
  void drop(const std::string& job);

 private:
  struct Permutation {
    uint64_t generation = 0;
    uint64_t n = 0;
    uint64_t seed = 0;                 // seed + epoch
    std::unique_ptr<uint32_t[]> perm;  // n entries; n <= 2^28 within the budget
    uint64_t last_used = 0;
  };
  // Evicts until `bytes` more fit: this job's oldest beyond its quota (when
  // perms is given), then anyone's oldest.
  void make_room(std::vector<Permutation>* perms, uint64_t bytes);
  void evict(std::vector<Permutation>& v, size_t i);

  std::map<std::string, std::vector<Permutation>> by_job_;
  size_t bytes_ = 0;     // kept
  size_t reserved_ = 0;  // being computed
  uint64_t clock_ = 0;
};

}  // namespace muster::daemon
