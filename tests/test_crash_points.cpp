// musterd killed with SIGKILL at random points of a stream of changes, many
// times over one state directory, and started again each time: what it
// restores is exactly what was acknowledged, plus at most the one change in
// flight when it died (saved, its reply lost: the client's resend is then
// answered from the reply cache). Values of up to 24 KiB make the change
// log outgrow the snapshot, so kills land in compactions too, and restarts
// replay logs over snapshots, torn tails included. (A disk whose syncs
// fail, or that is full, is test_disk_faults.cpp's, in process.)
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "muster/client.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::TestDaemon;

namespace {

std::string value_of(uint64_t i) {
  std::string v((i * 7919) % (24 * 1024) + 1, '\0');
  for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<char>('a' + (i + k) % 26);
  return v;
}

std::string key_of(uint64_t i) {
  return "k" + std::to_string(i);
}

}  // namespace

TEST_CASE("after a kill -9 at any point, the state is the acknowledged changes") {
  TestDaemon d;
  std::mt19937 rng(Catch::rngSeed() ? Catch::rngSeed() : std::random_device{}());
  // What the daemon must hold: key -> value, or nullopt for "must be absent".
  std::map<std::string, std::optional<std::string>> expected;
  uint64_t next = 0;
  int64_t count = 0;  // the "count" key: one add per change acknowledged
  const int kRuns = 16;
  for (int run = 0; run < kRuns; ++run) {
    INFO("run " << run << ", changes so far " << next);
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> acked{0};
    uint64_t first = next;
    std::optional<uint64_t> in_flight;
    std::thread writer([&] {
      try {
        // A short request timeout: once the daemon is gone the call fails
        // soon (a daemon that is gone is not waited for).
        Client w(ClientOptions{d.endpoint(), 300ms});
        w.join({"crash", 1, false, -1});
        for (uint64_t i = first; !stop; ++i) {
          in_flight = i;
          w.set(key_of(i), value_of(i));
          acked = i - first + 1;
        }
      } catch (const Error&) {
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 120 + 5));
    d.kill9();
    stop = true;
    writer.join();
    uint64_t done = first + acked;
    for (uint64_t i = first; i < done; ++i) expected[key_of(i)] = value_of(i);
    d.start();
    Client c(ClientOptions{d.endpoint(), 5s});
    c.join({"crash", 1, false, -1});
    // The change in flight: either saved or not; whichever, it stays so.
    if (in_flight && *in_flight == done) {
      try {
        auto v = c.get(key_of(done), 0ms);
        CHECK(v == value_of(done));
        expected[key_of(done)] = v;
      } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::kNotFound);
        expected[key_of(done)] = std::nullopt;
      }
      ++done;
    }
    next = done;
    // Nothing after it was saved.
    CHECK_THROWS_AS(c.get(key_of(next), 0ms), Error);
    // Every acknowledged change is there, with its value; every change
    // found missing once stays missing.
    for (const auto& [k, v] : expected) {
      if (v) {
        std::string got;
        CHECK_NOTHROW(got = c.get(k, 0ms));
        CHECK(got == *v);
      } else {
        CHECK_THROWS_AS(c.get(k, 0ms), Error);
      }
    }
    // Acknowledged adds survive every restart, each counted once.
    count = c.add("count", 1);
    CHECK(count == run + 1);
  }
  CHECK(next > static_cast<uint64_t>(kRuns));  // the writers did write
}
