// A normal job of two ranks, to check that a daemon still serves one after
// what a test did to it (test_hostile.cpp, test_limits.cpp). Uses Catch2:
// for test cases only.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "muster/client.hpp"

namespace muster::test {

// Two ranks of job (threads of this process, each its own Client, with a
// GPU) join the daemon at endpoint as ranks 0 and 1, rank 0's store value
// reaches rank 1, both pass a barrier, and they leave. Their rank infos,
// for more checks.
inline std::pair<RankInfo, RankInfo> check_two_ranks_work(const std::string& endpoint,
                                                          const std::string& job) {
  using namespace std::chrono_literals;
  Client c0({endpoint}), c1({endpoint});
  auto r0 = c0.join({job, 2, true, 0});
  auto r1 = c1.join({job, 2, true, 1});
  CHECK(r0.rank == 0);
  CHECK(r1.rank == 1);
  c0.set("greeting", "hello");
  CHECK(c1.get("greeting", 5s) == "hello");
  std::thread t([&] { c1.barrier("sync", 20s); });
  c0.barrier("sync", 20s);
  t.join();
  c0.leave();
  c1.leave();
  return {r0, r1};
}

}  // namespace muster::test
