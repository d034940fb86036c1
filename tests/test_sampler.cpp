#include "sampler/sampler.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using muster::ShardSpec;

struct FixtureCase {
  ShardSpec spec;
  std::vector<int64_t> expected;
  int line = 0;
};

std::string fixtures_dir() {
  if (const char* env = std::getenv("MUSTER_FIXTURES_DIR")) return env;
#ifdef MUSTER_SOURCE_DIR
  return MUSTER_SOURCE_DIR "/tests/fixtures";
#else
  return "tests/fixtures";
#endif
}

std::string describe(const ShardSpec& s) {
  std::ostringstream out;
  out << "n=" << s.dataset_size << " epoch=" << s.epoch << " seed=" << s.seed
      << " shuffle=" << s.shuffle << " drop_last=" << s.drop_last << " world=" << s.num_replicas
      << " rank=" << s.rank;
  return out.str();
}

// Parses "n epoch seed shuffle drop_last world rank : idx ..."; '#' lines are comments.
std::vector<FixtureCase> load_fixtures(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open sampler fixtures at " + path);
  std::vector<FixtureCase> cases;
  std::string text;
  for (int line_no = 1; std::getline(in, text); ++line_no) {
    if (text.empty() || text[0] == '#') continue;
    std::istringstream line(text);
    FixtureCase c;
    int shuffle = 0, drop_last = 0;
    std::string colon;
    line >> c.spec.dataset_size >> c.spec.epoch >> c.spec.seed >> shuffle >> drop_last >>
        c.spec.num_replicas >> c.spec.rank >> colon;
    if (!line || colon != ":") {
      throw std::runtime_error(path + ":" + std::to_string(line_no) + ": malformed fixture");
    }
    c.spec.shuffle = shuffle != 0;
    c.spec.drop_last = drop_last != 0;
    for (int64_t idx; line >> idx;) c.expected.push_back(idx);
    c.line = line_no;
    cases.push_back(std::move(c));
  }
  return cases;
}

// Catch would print both 100k-element vectors on failure; the first difference is what helps.
std::string first_difference(const std::vector<int64_t>& got, const std::vector<int64_t>& want) {
  if (got == want) return "";
  std::ostringstream out;
  out << "sizes " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (got[i] != want[i]) {
      out << "; first difference at " << i << ": got " << got[i] << ", torch " << want[i];
      break;
    }
  }
  return out.str();
}

bool torch_available() {
  return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

// One interpreter for all specs: importing torch costs seconds, a shard milliseconds.
std::vector<std::vector<int64_t>> torch_shards(const std::vector<ShardSpec>& specs) {
  std::string cmd =
      "/usr/bin/python3 -c '"
      "import sys\n"
      "from torch.utils.data.distributed import DistributedSampler as D\n"
      "a = [int(x) for x in sys.argv[1:]]\n"
      "for i in range(0, len(a), 7):\n"
      "    n, e, s, sh, dl, w, r = a[i:i + 7]\n"
      "    d = D(range(n), num_replicas=w, rank=r, shuffle=bool(sh), seed=s, drop_last=bool(dl))\n"
      "    d.set_epoch(e)\n"
      "    print(\" \".join(str(x) for x in d))\n"
      "'";
  for (const ShardSpec& s : specs) {
    cmd += " " + std::to_string(s.dataset_size) + " " + std::to_string(s.epoch) + " " +
           std::to_string(s.seed) + " " + std::to_string(int{s.shuffle}) + " " +
           std::to_string(int{s.drop_last}) + " " + std::to_string(s.num_replicas) + " " +
           std::to_string(s.rank);
  }
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("popen of /usr/bin/python3 failed");
  std::string output;
  char buf[1 << 16];
  for (size_t got; (got = std::fread(buf, 1, sizeof buf, pipe.get())) > 0;) output.append(buf, got);
  std::vector<std::vector<int64_t>> shards;
  std::istringstream lines(output);
  for (std::string text; std::getline(lines, text);) {
    std::istringstream line(text);
    std::vector<int64_t> shard;
    for (int64_t idx; line >> idx;) shard.push_back(idx);
    shards.push_back(std::move(shard));
  }
  return shards;
}

}  // namespace

TEST_CASE("shard_indices reproduces every torch DistributedSampler fixture exactly", "[sampler]") {
  const std::string path = fixtures_dir() + "/sampler_fixtures.txt";
  INFO("fixtures: " << path);
  const std::vector<FixtureCase> cases = load_fixtures(path);
  REQUIRE(cases.size() >= 100);
  for (const FixtureCase& c : cases) {
    INFO("fixture line " << c.line << ": " << describe(c.spec));
    CHECK(muster::shard_size(c.spec) == c.expected.size());
    CHECK(first_difference(muster::shard_indices(c.spec), c.expected) == "");
    // The two-step path, which callers use to share one permutation between ranks.
    const std::vector<int64_t> perm =
        c.spec.shuffle ? muster::torch_randperm(c.spec.dataset_size, c.spec.seed + c.spec.epoch)
                       : std::vector<int64_t>{};
    CHECK(first_difference(muster::shard_from_permutation(perm, c.spec), c.expected) == "");
  }
}

TEST_CASE("torch_randperm ignores seed bits above the low 32 like torch's manual_seed",
          "[sampler]") {
  // torch.randperm(20, generator=torch.Generator().manual_seed(2**32 + 5)), recorded from torch.
  const std::vector<int64_t> torch_value = {11, 0, 9, 10, 3, 15, 14, 18, 8,  2,
                                            19, 6, 5, 12, 1, 7,  4,  17, 16, 13};
  CHECK(muster::torch_randperm(20, (uint64_t{1} << 32) + 5) == torch_value);
  CHECK(muster::torch_randperm(20, 5) == torch_value);
  CHECK(muster::torch_randperm(0, 5).empty());
  CHECK(muster::torch_randperm(1, 5) == std::vector<int64_t>{0});
}

TEST_CASE("Mt19937 emits the same stream as std::mt19937", "[sampler]") {
  for (uint32_t seed : {0u, 1u, 5489u, 0xdeadbeefu, 0xffffffffu}) {
    INFO("seed " << seed);
    std::mt19937 reference(seed);
    muster::Mt19937 fast(seed);
    bool same = true;
    for (int i = 0; i < 5000 && same; ++i) same = reference() == fast();
    CHECK(same);
  }
}

namespace {

// For every dataset size 0..40 and world size 1..9: every rank's shard of
// that epoch, each as long as shard_size() says, then check(spec, shards)
// (spec.rank 0).
template <class F>
void for_every_world(uint64_t epoch, uint64_t seed, bool shuffle, bool drop_last, F check) {
  for (uint64_t n = 0; n <= 40; ++n) {
    for (uint32_t world = 1; world <= 9; ++world) {
      ShardSpec spec{.dataset_size = n,
                     .epoch = epoch,
                     .seed = seed,
                     .shuffle = shuffle,
                     .drop_last = drop_last,
                     .num_replicas = world,
                     .rank = 0};
      INFO(describe(spec));
      std::vector<std::vector<int64_t>> shards;
      for (uint32_t rank = 0; rank < world; ++rank) {
        spec.rank = rank;
        shards.push_back(muster::shard_indices(spec));
        REQUIRE(shards.back().size() == muster::shard_size(spec));
      }
      spec.rank = 0;
      check(spec, shards);
    }
  }
}

}  // namespace

TEST_CASE("shards of all ranks cover the whole dataset when drop_last is off", "[sampler]") {
  for (bool shuffle : {false, true})
    for_every_world(3, 11, shuffle, false, [](const ShardSpec& spec, const auto& shards) {
      const uint64_t n = spec.dataset_size;
      std::set<int64_t> seen;
      for (const auto& shard : shards) seen.insert(shard.begin(), shard.end());
      CHECK(seen.size() == n);
      if (n > 0) CHECK((*seen.begin() == 0 && *seen.rbegin() == int64_t(n) - 1));
    });
}

TEST_CASE("shards are disjoint and equal-sized when drop_last is on", "[sampler]") {
  for_every_world(1, 2, true, true, [](const ShardSpec& spec, const auto& shards) {
    const uint64_t n = spec.dataset_size, world = spec.num_replicas;
    std::set<int64_t> seen;
    for (const auto& shard : shards) {
      CHECK(shard.size() == n / world);
      seen.insert(shard.begin(), shard.end());
    }
    CHECK(seen.size() == (n / world) * world);
  });
}

TEST_CASE("invalid shard specs throw invalid_argument", "[sampler]") {
  ShardSpec no_replicas{.dataset_size = 10, .num_replicas = 0, .rank = 0};
  CHECK_THROWS_AS(muster::shard_indices(no_replicas), std::invalid_argument);
  CHECK_THROWS_AS(muster::shard_size(no_replicas), std::invalid_argument);

  ShardSpec rank_too_big{.dataset_size = 10, .num_replicas = 4, .rank = 4};
  CHECK_THROWS_AS(muster::shard_indices(rank_too_big), std::invalid_argument);
  CHECK_THROWS_AS(muster::shard_from_permutation({}, rank_too_big), std::invalid_argument);

  ShardSpec shuffled{.dataset_size = 10, .shuffle = true, .num_replicas = 2, .rank = 1};
  CHECK_THROWS_AS(muster::shard_from_permutation({0, 1, 2}, shuffled), std::invalid_argument);

  ShardSpec ordered{.dataset_size = 3, .shuffle = false, .num_replicas = 2, .rank = 1};
  CHECK_THROWS_AS(muster::shard_from_permutation({0, 1, 2}, ordered), std::invalid_argument);
  CHECK(muster::shard_from_permutation({}, ordered) == std::vector<int64_t>{1, 0});
}

TEST_CASE("shard_indices agrees with a live torch for random specs", "[sampler][torch]") {
  if (!torch_available()) {
    WARN("skipping live comparison: `/usr/bin/python3 -c 'import torch'` failed");
    return;
  }
  std::mt19937_64 rng(20240611);  // Fixed, so a failure reproduces.
  auto pick = [&rng](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  std::vector<ShardSpec> specs;
  for (int i = 0; i < 20; ++i) {
    ShardSpec s;
    s.dataset_size = pick(0, 3) == 0 ? pick(0, 12) : pick(0, 5000);
    s.epoch = pick(0, 100);
    // Keep seed + epoch below 2^64: torch raises there instead of wrapping.
    s.seed = pick(0, 1) == 0 ? pick(0, 0xffffffffu) : pick(0, uint64_t{1} << 62);
    s.shuffle = pick(0, 4) != 0;
    s.drop_last = pick(0, 1) == 0;
    s.num_replicas = static_cast<uint32_t>(pick(1, 9));
    s.rank = static_cast<uint32_t>(pick(0, s.num_replicas - 1));
    specs.push_back(s);
  }
  const std::vector<std::vector<int64_t>> expected = torch_shards(specs);
  REQUIRE(expected.size() == specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    INFO(describe(specs[i]));
    CHECK(first_difference(muster::shard_indices(specs[i]), expected[i]) == "");
  }
}
