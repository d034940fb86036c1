#include "gpu/placement.hpp"

#include <algorithm>
#include <bit>
#include <optional>
#include <tuple>

namespace muster::gpu {

namespace {

uint32_t nvlinks(const Device& a, const Device& b) {
  return b.index < a.nvlinks.size() ? a.nvlinks[b.index] : 0;
}

// The common PCIe ancestor; without NVML's word, the NUMA nodes tell
// "same node" from "across sockets" where they are known.
int32_t path(const Device& a, const Device& b) {
  if (b.index < a.paths.size()) return a.paths[b.index];
  bool same_node = a.numa_node >= 0 && a.numa_node == b.numa_node;
  return static_cast<int32_t>(same_node ? Path::kNumaNode : Path::kSystem);
}

// How well a set of GPUs is connected, summed over its pairs.
struct Score {
  int64_t linked_pairs = 0;  // pairs with at least one NVLink
  int64_t links = 0;         // NVLinks over all pairs
  int64_t hops = 0;          // PCIe path levels over all pairs
  uint64_t numa = 0;         // NUMA nodes touched, a bit each (unknown: bit 0)

  void add(const Device& d, const std::vector<const Device*>& others) {
    for (const Device* o : others) {
      uint32_t l = nvlinks(d, *o);
      linked_pairs += l > 0;
      links += l;
      hops += path(d, *o);
    }
    numa |= uint64_t{1} << std::clamp<int64_t>(d.numa_node + 1, 0, 63);
  }
  // Better is fewer NUMA nodes (a job that fits on one socket stays on
  // one: a ring is as fast as its slowest hop, and an NVLink pair does not
  // make up for crossing sockets), then more linked pairs, more links,
  // fewer PCIe hops.
  auto key() const { return std::make_tuple(std::popcount(numa), -linked_pairs, -links, hops); }
};

Score score(const std::vector<const Device*>& set) {
  Score s;
  std::vector<const Device*> seen;
  for (const Device* d : set) {
    s.add(*d, seen);
    seen.push_back(d);
  }
  return s;
}

// One candidate answer: the set with the job's held GPUs, and what it
// leaves free for the next job.
struct Choice {
  std::vector<size_t> picked;  // positions in `free`, ascending
  decltype(Score{}.key()) mine, rest;

  bool better_than(const Choice& o) const {
    return std::tie(mine, rest, picked) < std::tie(o.mine, o.rest, o.picked);
  }
};

Choice judge(const std::vector<const Device*>& free, std::vector<size_t> picked,
             const std::vector<const Device*>& held) {
  std::vector<const Device*> mine = held, rest;
  for (size_t i = 0, p = 0; i < free.size(); ++i)
    if (p < picked.size() && picked[p] == i)
      mine.push_back(free[i]), ++p;
    else
      rest.push_back(free[i]);
  return {std::move(picked), score(mine).key(), score(rest).key()};
}

// C(m, n), or more than `cap` when it exceeds it.
uint64_t combinations(size_t m, size_t n, uint64_t cap) {
  uint64_t c = 1;
  for (size_t i = 1; i <= n; ++i) {
    c = c * (m - n + i) / i;
    if (c > cap) return cap + 1;
  }
  return c;
}

// Every n-subset, in lexicographic order: exact for the node sizes that
// exist (8 GPUs: at most 70 sets).
Choice exhaustive(const std::vector<const Device*>& free, size_t n,
                  const std::vector<const Device*>& held) {
  std::vector<size_t> pick(n);
  for (size_t i = 0; i < n; ++i) pick[i] = i;
  Choice best = judge(free, pick, held);
  for (;;) {
    size_t i = n;
    while (i > 0 && pick[i - 1] == free.size() - n + i - 1) --i;
    if (i == 0) return best;
    ++pick[i - 1];
    for (size_t j = i; j < n; ++j) pick[j] = pick[j - 1] + 1;
    if (Choice c = judge(free, pick, held); c.better_than(best)) best = std::move(c);
  }
}

// Too many sets to try (many GPUs, half of them wanted): from every seed,
// grow by the GPU that improves the set most.
Choice greedy(const std::vector<const Device*>& free, size_t n,
              const std::vector<const Device*>& held) {
  std::optional<Choice> best;
  for (size_t seed = 0; seed < free.size(); ++seed) {
    std::vector<size_t> pick{seed};
    std::vector<const Device*> members = held;
    members.push_back(free[seed]);
    Score s = score(members);
    while (pick.size() < n) {
      std::optional<std::pair<decltype(s.key()), size_t>> next;
      for (size_t c = 0; c < free.size(); ++c) {
        if (std::find(pick.begin(), pick.end(), c) != pick.end()) continue;
        Score t = s;
        t.add(*free[c], members);
        if (!next || t.key() < next->first) next = {t.key(), c};
      }
      s.add(*free[next->second], members);
      members.push_back(free[next->second]);
      pick.push_back(next->second);
    }
    std::sort(pick.begin(), pick.end());
    if (Choice c = judge(free, pick, held); !best || c.better_than(*best)) best = std::move(c);
  }
  return *best;
}

// From the lowest index, each next rank the GPU best connected to the last.
std::vector<uint32_t> ring(std::vector<const Device*> set) {
  std::sort(set.begin(), set.end(), [](auto* a, auto* b) { return a->index < b->index; });
  std::vector<uint32_t> out;
  const Device* at = set.front();
  set.erase(set.begin());
  out.push_back(at->index);
  while (!set.empty()) {
    auto next = std::min_element(set.begin(), set.end(), [&](auto* a, auto* b) {
      return std::make_tuple(-int64_t{nvlinks(*at, *a)}, path(*at, *a), a->index) <
             std::make_tuple(-int64_t{nvlinks(*at, *b)}, path(*at, *b), b->index);
    });
    at = *next;
    set.erase(next);
    out.push_back(at->index);
  }
  return out;
}

}  // namespace

std::vector<uint32_t> place(const std::vector<const Device*>& free, size_t n,
                            const std::vector<const Device*>& held) {
  if (n == 0 || free.size() < n) return {};
  // Nothing known of how they connect (simulated GPUs, CUDA's list): the
  // lowest free ones, without trying sets; and beyond the largest nodes
  // built (a 4,096-GPU simulation) the same, as the search would stall
  // the loop.
  constexpr size_t kMaxSearched = 64;
  bool known = std::any_of(free.begin(), free.end(), [](const Device* d) {
    return !d->nvlinks.empty() || !d->paths.empty() || d->numa_node >= 0;
  });
  if (!known || free.size() > kMaxSearched) {
    std::vector<uint32_t> out;
    for (size_t i = 0; i < n; ++i) out.push_back(free[i]->index);
    return out;
  }
  // 20,000 sets of up to 16 GPUs cost a few milliseconds of the loop, once
  // per job start.
  constexpr uint64_t kMaxSets = 20000;
  Choice c = combinations(free.size(), n, kMaxSets) <= kMaxSets ? exhaustive(free, n, held)
                                                                : greedy(free, n, held);
  std::vector<const Device*> set;
  for (size_t i : c.picked) set.push_back(free[i]);
  return ring(std::move(set));
}

}  // namespace muster::gpu
