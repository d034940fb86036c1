// Load: 1,000 clients (threads of this process, each with its own client
// and connection) join one job of one private daemon at once, use the store
// and pass a barrier; no reply is lost, duplicated or delivered to the wrong
// client.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "muster/client.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kClients = 1000;

// Each client is a socket (two descriptors) here and a connection in the
// daemon, which inherits our limit.
void raise_fd_limit(rlim_t want) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rlim_t target = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
  if (rl.rlim_cur < target) {
    rl.rlim_cur = target;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

struct Result {
  bool ok = false;
  std::string error;
  uint32_t rank = 0;
  int64_t ticket = 0;  // what add("counter", 1) returned
  int64_t total = 0;   // the counter after the barrier
  bool own_value = false;
  bool neighbour_value = false;
};

std::string value_of(uint32_t r) {
  // Distinct lengths too, so that a reply meant for another client can
  // never pass for this one's.
  return "value-of-" + std::to_string(r) + "-" + std::string(r % 37, 'x');
}

}  // namespace

TEST_CASE("1,000 clients join one daemon at once; every reply reaches its own client") {
  raise_fd_limit(16384);
  test::TestDaemon d;
  const std::string job = "load-1000";
  std::vector<Result> results(kClients);
  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  std::atomic<uint32_t> connected{0};
  std::vector<std::thread> threads;
  threads.reserve(kClients);
  for (uint32_t i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      Result& res = results[i];
      try {
        // Generous: 1,000 requests arrive together on a shared 2-core machine.
        Client c({d.endpoint(), 60s});
        ++connected;
        {
          std::unique_lock lk(m);
          cv.wait(lk, [&] { return go; });
        }
        // Threads of one process share a pid: each asks for its local rank.
        auto info = c.join({job, kClients, false, static_cast<int>(i)});
        res.rank = info.rank;
        if (info.world_size != kClients || info.local_rank != i)
          throw std::runtime_error("wrong rank info");
        std::string key = "key/" + std::to_string(i);
        c.set(key, value_of(i));
        res.own_value = c.get(key, 60s) == value_of(i);
        res.ticket = c.add("counter", 1);
        c.barrier("all-in", 60s);
        res.total = c.add("counter", 0);
        uint32_t next = (i + 1) % kClients;
        res.neighbour_value = c.get("key/" + std::to_string(next), 60s) == value_of(next);
        res.ok = true;
      } catch (const std::exception& e) {
        res.error = e.what();
      }
    });
  REQUIRE(test::eventually([&] { return connected == kClients; }, 60s));
  auto t0 = std::chrono::steady_clock::now();
  {
    std::lock_guard lk(m);
    go = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  auto took = std::chrono::steady_clock::now() - t0;
  WARN("1,000 clients: join, set, get, add, barrier, add, get in "
       << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");

  std::set<uint32_t> ranks;
  std::set<int64_t> tickets;
  size_t failed = 0;
  for (uint32_t i = 0; i < kClients; ++i) {
    const Result& r = results[i];
    if (!r.ok) {
      if (failed++ < 5) UNSCOPED_INFO("client " << i << ": " << r.error);
      continue;
    }
    ranks.insert(r.rank);
    tickets.insert(r.ticket);
    if (!r.own_value || !r.neighbour_value || r.total != kClients) {
      if (failed++ < 5)
        UNSCOPED_INFO("client " << i << ": own value " << r.own_value << ", neighbour's "
                                << r.neighbour_value << ", counter " << r.total);
    }
  }
  CHECK(failed == 0);
  // Every rank exactly once, 0..999.
  CHECK(ranks.size() == kClients);
  CHECK((ranks.empty() || (*ranks.begin() == 0 && *ranks.rbegin() == kClients - 1)));
  // Each add answered once, to its own caller: the tickets are 1..1000.
  CHECK(tickets.size() == kClients);
  CHECK((tickets.empty() || (*tickets.begin() == 1 && *tickets.rbegin() == kClients)));
  // The daemon holds every slot joined by this process.
  auto status = Client({d.endpoint()}).status();
  REQUIRE(status.jobs.size() == 1);
  CHECK(status.jobs[0].world_size == kClients);
  size_t joined = 0;
  for (const auto& r : status.jobs[0].ranks)
    if (r.state == "joined" && r.pid == getpid()) ++joined;
  CHECK(joined == kClients);
}
