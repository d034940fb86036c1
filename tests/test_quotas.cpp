// Quotas (daemon/core/quotas.hpp): a request over one gets quota_exceeded
// with a sentence naming the option that raises it, and changes nothing;
// what was stored before is all still there; a state saved above a lowered
// quota still loads whole.
#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "muster/client.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::TestDaemon;

namespace {

// The error a call throws; kOk when it throws none.
template <class F>
std::pair<ErrorCode, std::string> error_of(F&& f) {
  try {
    f();
    return {ErrorCode::kOk, ""};
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
}

#define CHECK_QUOTA(call, option)                               \
  do {                                                          \
    auto [code_, why_] = error_of([&] { call; });               \
    INFO(why_);                                                 \
    CHECK(code_ == ErrorCode::kQuotaExceeded);                  \
    CHECK(why_.find("musterd --" option) != std::string::npos); \
  } while (0)

// What a status reply says of the jobs, as one comparable string.
std::string jobs_of(Client& c) {
  std::string s;
  for (const auto& j : c.status().jobs) {
    s += j.id + " gen=" + std::to_string(j.generation) + " ranks=";
    for (const auto& r : j.ranks) s += std::to_string(r.pid) + ":" + r.state + ",";
    s += ";";
  }
  return s;
}

std::map<std::string, std::optional<std::string>> read_keys(Client& c,
                                                            std::initializer_list<const char*> ks) {
  std::map<std::string, std::optional<std::string>> m;
  for (const char* k : ks) m[k] = c.try_get(k);
  return m;
}

}  // namespace

TEST_CASE("a job's store refuses bytes and keys over its quota and keeps what it had") {
  TestDaemon d({"--max-store-bytes", "1000", "--max-store-keys", "4"});
  Client c({d.endpoint()});
  c.join({"quota", 1, false, 0});
  c.set("a", std::string(500, 'a'));  // 501 bytes with its key
  auto before = read_keys(c, {"a", "b", "c", "n", "x", "y"});
  auto jobs_before = jobs_of(c);

  CHECK_QUOTA(c.set("b", std::string(500, 'b')), "max-store-bytes");
  CHECK_QUOTA(c.set("a", std::string(1000, 'a')), "max-store-bytes");
  CHECK_QUOTA(c.compare_set("c", "", std::string(600, 'c')), "max-store-bytes");
  CHECK(read_keys(c, {"a", "b", "c", "n", "x", "y"}) == before);
  CHECK(jobs_of(c) == jobs_before);

  // Within the quota: a smaller value, a counter.
  c.set("a", std::string(400, 'a'));
  CHECK(c.add("n", 7) == 7);
  c.set("x", "1");
  c.set("y", "2");  // 4 keys: a, n, x, y
  before = read_keys(c, {"a", "b", "c", "n", "x", "y"});
  CHECK_QUOTA(c.set("b", "1"), "max-store-keys");
  CHECK_QUOTA(c.add("c", 1), "max-store-keys");
  CHECK(read_keys(c, {"a", "b", "c", "n", "x", "y"}) == before);
  // An existing key may change; a deleted one makes room.
  CHECK(c.add("n", 1) == 8);
  CHECK(c.remove("x"));
  c.set("b", "1");
  CHECK(c.get("b", 1s) == "1");
  CHECK(c.get("a", 1s) == std::string(400, 'a'));
  c.leave();
}

TEST_CASE("a job refuses a parked wait over its quota; the parked ones are all answered") {
  TestDaemon d({"--max-parked-waits", "2"});
  Client c0({d.endpoint()}), c1({d.endpoint()}), c2({d.endpoint()});
  c0.join({"waits", 3, false, 0});
  c1.join({"waits", 3, false, 1});
  c2.join({"waits", 3, false, 2});
  // A thread refused while the probe below holds a slot tries again.
  auto parked = [](auto call) {
    for (;;) {
      auto e = error_of(call);
      if (e.first != ErrorCode::kQuotaExceeded) return e.first;
      std::this_thread::sleep_for(10ms);
    }
  };
  std::string got1, got2;
  ErrorCode e1{}, e2{};
  std::thread t1([&] { e1 = parked([&] { got1 = c1.get("go", 60s); }); });
  std::thread t2([&] {
    e2 = parked([&] {
      c2.wait({"go"}, 60s);
      got2 = "ok";
    });
  });
  // Until both are parked, a short wait times out; then it is refused.
  // (CHECK, not REQUIRE: the threads must be let go and joined below.)
  std::pair<ErrorCode, std::string> e;
  CHECK(test::eventually(
      [&] {
        e = error_of([&] { c0.get("go", 50ms); });
        return e.first == ErrorCode::kQuotaExceeded;
      },
      30s));
  CHECK(e.second.find("musterd --max-parked-waits") != std::string::npos);
  CHECK_QUOTA(c0.wait({"go"}, 10s), "max-parked-waits");
  CHECK_QUOTA(c0.barrier("b", 10s), "max-parked-waits");
  CHECK_FALSE(c0.try_get("go").has_value());
  // Nothing was lost: the set answers both parked requests.
  c0.set("go", "now");
  t1.join();
  t2.join();
  CHECK(e1 == ErrorCode::kOk);
  CHECK(e2 == ErrorCode::kOk);
  CHECK(got1 == "now");
  CHECK(got2 == "ok");
  // With nothing parked, a barrier of all three completes (the refused
  // arrival did not count).
  std::thread b1([&] { c1.barrier("b", 60s); });
  std::thread b2([&] { c2.barrier("b", 60s); });
  c0.barrier("b", 60s);
  b1.join();
  b2.join();
}

TEST_CASE("a uid cannot own more jobs than its quota; ending one makes room") {
  TestDaemon d({"--max-jobs-per-uid", "2"});
  Client a({d.endpoint()}), b({d.endpoint()}), c({d.endpoint()});
  a.join({"one", 1, false, 0});
  b.join({"two", 1, false, 0});
  auto jobs_before = jobs_of(c);
  CHECK_QUOTA(c.join({"three", 1, false, 0}), "max-jobs-per-uid");
  CHECK_FALSE(c.joined());
  CHECK(jobs_of(c) == jobs_before);
  // A second rank of an existing job is no new job.
  a.leave();
  REQUIRE(test::eventually([&] { return c.status().jobs.size() == 1; }, 10s));
  c.join({"three", 1, false, 0});
  CHECK(c.rank_info().rank == 0);
}

TEST_CASE("a store saved above a lowered quota loads whole, and may shrink but not grow") {
  TestDaemon d;
  Client c({d.endpoint()});
  c.join({"kept", 1, false, 0});
  for (const char* k : {"k1", "k2", "k3"}) c.set(k, std::string(400, k[1]));
  d.kill9();
  d.start({"--max-store-bytes", "1000", "--max-store-keys", "2"});
  for (const char* k : {"k1", "k2", "k3"}) CHECK(c.get(k, 5s) == std::string(400, k[1]));
  CHECK_QUOTA(c.set("k4", "x"), "max-store-keys");
  CHECK_QUOTA(c.set("k1", std::string(500, '1')), "max-store-bytes");
  CHECK(c.get("k1", 5s) == std::string(400, '1'));
  c.set("k1", "small");
  CHECK(c.get("k1", 5s) == "small");
}

TEST_CASE("jobs saved above a lowered per-uid quota all come back; no new one is made") {
  TestDaemon d;
  Client a({d.endpoint()}), b({d.endpoint()});
  a.join({"one", 1, false, 0});
  b.join({"two", 1, false, 0});
  a.set("k", "v");
  d.kill9();
  // The quota is a ceiling for new growth: what was saved under the old
  // setting is restored whole, and nothing more is made until jobs end.
  d.start({"--max-jobs-per-uid", "1"});
  Client c({d.endpoint()});
  CHECK(c.status().jobs.size() == 2);
  CHECK(a.get("k", 5s) == "v");
  CHECK_QUOTA(c.join({"three", 1, false, 0}), "max-jobs-per-uid");
  CHECK_FALSE(c.joined());
  a.leave();
  b.leave();
  REQUIRE(test::eventually([&] { return c.status().jobs.empty(); }, 10s));
  c.join({"three", 1, false, 0});
  CHECK(c.rank_info().rank == 0);
}
