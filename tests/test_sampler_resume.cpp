// Resumption of the sampler (ShardSpec::consumed): W1 ranks use k indices
// each, W2 ranks take over the rest of the same epoch, and together they use
// every index of the epoch exactly once (torch's padding counted apart).
#include <catch2/catch.hpp>

#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "sampler/sampler.hpp"

using muster::ShardSpec;

namespace {

// The ranks' shards interleaved back into sampler order: position p of the
// (padded) pass is rank p % W's entry p / W.
std::vector<int64_t> pass_order(ShardSpec spec, uint64_t per_rank_limit) {
  std::vector<std::vector<int64_t>> ranks;
  for (uint32_t r = 0; r < spec.num_replicas; ++r) {
    spec.rank = r;
    auto s = muster::shard_indices(spec);
    if (s.size() > per_rank_limit) s.resize(per_rank_limit);
    ranks.push_back(std::move(s));
  }
  std::vector<int64_t> out;
  const uint64_t len = ranks.empty() ? 0 : ranks[0].size();
  for (uint64_t j = 0; j < len; ++j)
    for (const auto& r : ranks) out.push_back(r.at(j));
  return out;
}

std::vector<int64_t> epoch_perm(const ShardSpec& s) {
  if (s.shuffle) return muster::torch_randperm(s.dataset_size, s.seed + s.epoch);
  std::vector<int64_t> v(s.dataset_size);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

TEST_CASE("a resumed epoch under another world size uses every index exactly once",
          "[sampler][resume]") {
  uint64_t cases = 0;
  for (bool shuffle : {true, false})
    for (bool drop_last : {false, true})
      for (uint64_t n : {0, 1, 2, 3, 5, 7, 16, 31, 40})
        for (uint32_t w1 = 1; w1 <= 5; ++w1)
          for (uint32_t w2 = 1; w2 <= 6; ++w2) {
            ShardSpec first{.dataset_size = n,
                            .epoch = 4,
                            .seed = 9,
                            .shuffle = shuffle,
                            .drop_last = drop_last,
                            .num_replicas = w1};
            const auto perm = epoch_perm(first);
            for (uint64_t k = 0; k <= muster::shard_size(first); ++k) {
              std::ostringstream what;
              what << "n=" << n << " W1=" << w1 << " W2=" << w2 << " k=" << k
                   << " shuffle=" << shuffle << " drop_last=" << drop_last;
              INFO(what.str());
              const auto before = pass_order(first, k);
              const uint64_t consumed = muster::consumed_after(n, 0, k, w1);
              REQUIRE(consumed == std::min<uint64_t>(n, k * w1));
              // What W1 used is perm[:consumed], then torch's padding only.
              REQUIRE(std::vector<int64_t>(before.begin(), before.begin() + consumed) ==
                      std::vector<int64_t>(perm.begin(), perm.begin() + consumed));
              ShardSpec rest = first;
              rest.num_replicas = w2;
              rest.consumed = consumed;
              const auto after = pass_order(rest, UINT64_MAX);
              const uint64_t m = n - consumed;
              const uint64_t used = drop_last ? m / w2 * w2 : m;
              REQUIRE(after.size() == (drop_last ? used : (m + w2 - 1) / w2 * w2));
              REQUIRE(
                  std::vector<int64_t>(after.begin(), after.begin() + used) ==
                  std::vector<int64_t>(perm.begin() + consumed, perm.begin() + consumed + used));
              std::map<int64_t, int> seen;
              for (uint64_t p = 0; p < consumed; ++p) ++seen[before[p]];
              for (uint64_t p = 0; p < used; ++p) ++seen[after[p]];
              for (const auto& [index, times] : seen) REQUIRE(times == 1);
              REQUIRE(seen.size() == consumed + used);
              if (!drop_last) REQUIRE(seen.size() == n);
              // Padding repeats what the resumed pass already holds.
              for (uint64_t p = used; p < after.size(); ++p) REQUIRE(seen.count(after[p]) == 1);
              ++cases;
            }
          }
  CHECK(cases > 1000);
}

TEST_CASE("consumed 0 is torch's sampler and consumed n an empty pass", "[sampler][resume]") {
  ShardSpec s{.dataset_size = 101, .epoch = 2, .seed = 5, .num_replicas = 4, .rank = 3};
  const auto fresh = muster::shard_indices(s);
  s.consumed = 0;
  CHECK(muster::shard_indices(s) == fresh);
  s.consumed = 101;
  CHECK(muster::shard_size(s) == 0);
  CHECK(muster::shard_indices(s).empty());
  s.consumed = 102;
  CHECK_THROWS_AS(muster::shard_indices(s), std::invalid_argument);
  CHECK(muster::consumed_after(10, 4, 1, 3) == 7);
  CHECK(muster::consumed_after(10, 4, 3, 3) == 10);
  CHECK(muster::consumed_after(10, 4, UINT64_MAX, 7) == 10);  // no overflow
}
