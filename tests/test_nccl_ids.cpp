// The NCCL unique-id broker: one id per (job, generation, name), made by the
// root and waited for by everyone else.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <set>
#include <thread>

#include "muster/broadcast.hpp"
#include "muster/client.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;

namespace {
// Runs f(rank, client) on `world` rank threads of one job and returns when all are done.
template <class F>
void on_ranks(const test::TestDaemon& d, const std::string& job, uint32_t world, F f) {
  std::vector<std::thread> ts;
  for (uint32_t r = 0; r < world; ++r)
    ts.emplace_back([&, r] {
      Client c({d.endpoint()});
      c.join({job, world, false, static_cast<int>(r)});
      f(r, c);
    });
  for (auto& t : ts) t.join();
}
}  // namespace

TEST_CASE("every rank gets the same 128-byte NCCL id from the root") {
  test::TestDaemon d;
  std::vector<std::string> ids(4);
  on_ranks(d, "ids", 4,
           [&](uint32_t r, Client& c) { ids[r] = muster::nccl_unique_id(c, "world", 10s); });
  REQUIRE(ids[0].size() == 128);
  for (const auto& id : ids) CHECK(id == ids[0]);
  CHECK(ids[0] != std::string(128, '\0'));
}

TEST_CASE("a second publish of the same communicator is refused, another name is fresh") {
  test::TestDaemon d;
  Client c({d.endpoint()});
  c.join({"one", 1, false, 0});
  auto first = muster::nccl_unique_id(c, "world");
  try {
    muster::nccl_unique_id(c, "world");
    FAIL("published twice");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kConflict);
    CHECK_THAT(e.what(), Catch::Contains("already published"));
  }
  auto other = muster::nccl_unique_id(c, "pipeline");
  CHECK(other.size() == 128);
  CHECK(other != first);
}

TEST_CASE("an NCCL id, once published, cannot be changed or deleted by any store request") {
  // Relays keep the ids they fetched (daemon/cluster/relays.cpp); that is
  // sound only while a published id stays what it was.
  test::TestDaemon d;
  Client c({d.endpoint()});
  c.join({"sealed", 1, false, 0});
  const std::string id = muster::nccl_unique_id(c, "world");
  const std::string key = "muster.nccl/" + std::to_string(c.rank_info().generation) + "/world/1/0";
  REQUIRE(c.get(key) == id);
  auto refused = [&](const char* what, const std::function<void()>& f) {
    INFO(what);
    try {
      f();
      FAIL("changed a published NCCL id");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kConflict);
      CHECK_THAT(e.what(), Catch::Contains("set once"));
    }
    CHECK(c.get(key) == id);
  };
  refused("set", [&] { c.set(key, "x"); });
  refused("append", [&] { c.append(key, "x"); });
  refused("add", [&] { c.add(key, 1); });
  refused("remove", [&] { c.remove(key); });
  refused("compare_set", [&] { c.compare_set(key, id, "x"); });
  refused("multi_set", [&] { c.multi_set({"muster-free", key}, {"a", "b"}); });
  refused("queue_push", [&] { c.queue_push(key, "x"); });
  refused("queue_pop", [&] { c.queue_pop(key, 0ms); });
  // No set-once key is a queue, set or not: a pop parked on one would
  // change it when a value came.
  for (const std::string unset : {"muster.nccl/no-queue"}) {
    CHECK_THROWS_WITH(c.queue_pop(unset, 100ms), Catch::Contains("cannot be a queue"));
    CHECK_THROWS_WITH(c.queue_push(unset, "x"), Catch::Contains("cannot be a queue"));
    CHECK_FALSE(c.try_get(unset));
  }
  // multi_set changed nothing, not even its other key.
  CHECK_FALSE(c.try_get("muster-free"));
  // What does not change it still works: a compare_set that does not match
  // answers the id, and one that sets the same value is a no-op.
  CHECK(c.compare_set(key, "", "x") == id);
  CHECK(c.compare_set(key, id, id) == id);
  // An unset key under the prefix may be set once, by any request.
  c.set("muster.nccl/own", "v");
  CHECK_THROWS_AS(c.set("muster.nccl/own", "w"), Error);
  // Other keys are torch's, as ever.
  c.set("plain", "1");
  c.set("plain", "2");
  CHECK(c.remove("plain"));
}

TEST_CASE("a rank waiting for an id that never comes learns which rank should publish it") {
  test::TestDaemon d;
  Client root({d.endpoint()});
  root.join({"late", 2, false, 0});  // joined, but never publishes
  Client c({d.endpoint()});
  c.join({"late", 2, false, 1});
  try {
    muster::nccl_unique_id(c, "world", 200ms);
    FAIL("got an id nobody published");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kTimeout);
    CHECK_THAT(e.what(), Catch::Contains("rank 0 was expected to publish"));
  }
}

TEST_CASE("scalable init: id i comes from the first rank of NCCL's block for root i") {
  // NCCL's bootstrap (src/bootstrap.cc, firstRankFromRoot): blocks of
  // world/n ranks, the first world%n of them one rank larger.
  auto roots = [](uint32_t n, uint32_t world) {
    std::vector<uint32_t> r;
    for (uint32_t i = 0; i < n; ++i) r.push_back(muster::nccl_id_root(i, n, world));
    return r;
  };
  CHECK(roots(3, 7) == std::vector<uint32_t>{0, 3, 5});
  CHECK(roots(3, 8) == std::vector<uint32_t>{0, 3, 6});
  CHECK(roots(4, 10) == std::vector<uint32_t>{0, 3, 6, 8});
  CHECK(roots(4, 9) == std::vector<uint32_t>{0, 3, 5, 7});
  CHECK(roots(2, 3) == std::vector<uint32_t>{0, 2});
  CHECK(roots(5, 5) == std::vector<uint32_t>{0, 1, 2, 3, 4});
  CHECK(roots(1, 9) == std::vector<uint32_t>{0});
  CHECK(roots(6, 16) == std::vector<uint32_t>{0, 3, 6, 9, 12, 14});
  CHECK(roots(4, 4) == std::vector<uint32_t>{0, 1, 2, 3});
  CHECK(roots(2, 8) == std::vector<uint32_t>{0, 4});
  CHECK(roots(5, 1000) == std::vector<uint32_t>{0, 200, 400, 600, 800});
  CHECK(roots(3, 100000) == std::vector<uint32_t>{0, 33334, 66667});
  // Each root is in its own block: block i holds world/n (+1 for the first
  // world%n) ranks, and the blocks tile the world.
  for (uint32_t world : {1u, 2u, 7u, 64u, 1000u})
    for (uint32_t n = 1; n <= std::min(world, 17u); ++n) {
      auto r = roots(n, world);
      CHECK(r[0] == 0);
      std::vector<uint32_t> block;
      for (uint32_t i = 0; i + 1 < n; ++i) {
        CHECK(r[i + 1] > r[i]);  // strictly increasing
        block.push_back(r[i + 1] - r[i]);
      }
      block.push_back(world - r[n - 1]);
      for (uint32_t i = 0; i < n; ++i) CHECK(block[i] == world / n + (i < world % n ? 1 : 0));
      // Sizes differ by at most one, larger blocks first.
      CHECK(*std::max_element(block.begin(), block.end()) -
                *std::min_element(block.begin(), block.end()) <=
            1);
      CHECK(std::is_sorted(block.rbegin(), block.rend()));
    }
  test::TestDaemon d;
  std::vector<std::vector<std::string>> got(8);
  on_ranks(d, "scalable", 8,
           [&](uint32_t r, Client& c) { got[r] = muster::nccl_unique_ids(c, 3, "w", 10s); });
  REQUIRE(got[0].size() == 3);
  std::set<std::string> distinct(got[0].begin(), got[0].end());
  CHECK(distinct.size() == 3);
  for (const auto& v : got) CHECK(v == got[0]);
  Client c({d.endpoint()});
  c.join({"too-many", 2, false, 0});
  CHECK_THROWS_AS(muster::nccl_unique_ids(c, 3), Error);
}
