// The daemon's global ceilings and each user's fair share of them
// (daemon/core/ceilings.hpp, issue 43): uid 65534 tries to take a private
// musterd's memory and its state directory with stores and parked waits,
// within every per-job and per-uid quota; uid 65533 and root store beside
// it. Before, nothing bounded the sum: one uid stored 959 MiB and another
// user's set+get took up to 5.6 s. Now the hog is refused at its share
// with quota_exceeded naming the ceiling, the others store on, and the
// second user's set+get keeps a p99 <= 100 ms throughout.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "latency_checks.hpp"
#include "protocol/envelope.hpp"
#include "protocol/messages.hpp"
#include "protocol/store_messages.hpp"
#include "support/as_user.hpp"
#include "support/process.hpp"
#include "support/skip.hpp"

using namespace muster;
using namespace muster::proto;
using namespace muster::test;
using namespace std::chrono_literals;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 1e9;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100 * v.size()))];
}

// As uid 65534: joins `job` and sets 1 MiB values until one is refused;
// says "stored N", then the refusal. Stays (its job with it) until told.
void hog_stores(const std::string& ep, const std::string& job, Lines& io) {
  RawClient c(ep);
  io.say(c.ask(encode(1, Join{job, 1, false, ::getpid(), -1})));
  const std::string value(kMiB, 'h');
  int stored = 0;
  std::string last;
  for (int i = 0; i < 200; ++i) {
    last = c.ask(encode(i + 2, StoreSet{job, "k" + std::to_string(i), value}), 10s);
    if (last != "reply=ok") break;
    ++stored;
  }
  io.say("stored " + std::to_string(stored));
  io.say(last);
  // Every other way to grow a store is held to the same share.
  const std::string mib(kMiB, 'g');
  std::string others;
  for (const std::string& frame : {encode(300, StoreMultiSet{job, {{"m1", mib}, {"m2", "x"}}}),
                                   encode(301, StoreCompareSet{job, "c", "", mib}),
                                   encode(302, StoreQueuePush{job, "q", mib})})
    others += c.ask(frame).substr(0, 26) + ";";
  io.say(others);
  io.hear();
}

// As uid 65533: joins, then a set+get of 64 KiB in a loop, timed, until
// told "stop"; says the p99 in ms and how many; then sets `more` values of
// 1 MiB and says how many were taken.
void victim(const std::string& ep, int more, Lines& io) {
  RawClient c(ep);
  io.say(c.ask(encode(1, Join{"mine", 1, false, ::getpid(), -1})));
  const std::string small(64 << 10, 'v');
  std::vector<double> ms;
  uint64_t id = 2;
  int failed = 0;
  // Back to back: the p99 is of as many requests as the attack's time
  // allows (n is told with it), not of one every 2 ms.
  while (io.hear(0ms) != "stop") {
    auto t0 = std::chrono::steady_clock::now();
    failed += c.ask(encode(id++, StoreSet{"mine", "small", small})) != "reply=ok";
    failed += c.ask(encode(id++, StoreGet{"mine", "small", 0})).rfind("reply=value", 0) != 0;
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  io.say("p99 " + std::to_string(percentile(ms, 99)) + " n " + std::to_string(ms.size()) +
         " failed " + std::to_string(failed));
  int taken = 0;
  for (int i = 0; i < more; ++i)
    taken += c.ask(encode(id++, StoreSet{"mine", "m" + std::to_string(i), std::string(kMiB, 'm')}),
                   10s) == "reply=ok";
  io.say("taken " + std::to_string(taken));
  io.hear();
}

int number_after(const std::string& line, const std::string& word) {
  auto at = line.find(word + " ");
  return at == std::string::npos ? -1 : std::stoi(line.substr(at + word.size() + 1));
}

}  // namespace

TEST_CASE("one user's stores stop at its share of the memory ceiling; others store on",
          "[hostile][ceilings]") {
  if (!root_for("run other users")) return;
  test::OpenDaemon d({"--max-memory", "64M", "--max-state-bytes", "none"});
  const std::string ep = d.endpoint();
  AsNobody other([&](Lines& io) { victim(ep, 8, io); }, kSecondUser);
  REQUIRE(starts_with(other.hear(), "reply=rank_info"));
  AsNobody hog([&](Lines& io) { hog_stores(ep, "hog", io); });
  REQUIRE(starts_with(hog.hear(), "reply=rank_info"));
  // Two users active: each may grow to half of 64 MiB, the hog's values
  // costing a little more than their MiB (the key and its bookkeeping).
  const std::string stored = hog.hear(60s), refusal = hog.hear(), others = hog.hear();
  INFO(stored << "; " << refusal << "; " << others);
  CHECK(others ==
        "error=quota_exceeded uid 6;error=quota_exceeded uid 6;error=quota_exceeded uid 6;");
  CHECK(number_after(stored, "stored") >= 28);
  CHECK(number_after(stored, "stored") < 32);
  CHECK(starts_with(refusal, "error=quota_exceeded"));
  CHECK(refusal.find("its share") != std::string::npos);
  CHECK(refusal.find("musterd --max-memory") != std::string::npos);
  other.say("stop");
  const std::string timing = other.hear(), taken = other.hear(60s);
  INFO(timing << "; " << taken);
  WARN("uid 65533's set+get while uid 65534 filled its share: " << timing);
  CHECK(number_after(timing, "failed") == 0);
  CHECK(p99_within_bound(std::stod(timing.substr(4))));
  CHECK(taken == "taken 8");
  // Root stores beside them (held to the ceiling, not a share), and with
  // three users active the hog, above its new share of a third, grows no
  // more.
  REQUIRE(starts_with(ask(ep, encode(1, Join{"rootjob", 1, false, ::getpid(), -1})),
                      "reply=rank_info"));
  for (int i = 0; i < 8; ++i)
    CHECK(ask(ep, encode(i + 2, StoreSet{"rootjob", "r" + std::to_string(i),
                                         std::string(kMiB, 'r')})) == "reply=ok");
  CHECK(process_exists(d.pid()));
}

TEST_CASE("parked waits count towards a user's share: the next is refused, not parked",
          "[hostile][ceilings]") {
  if (!root_for("run other users")) return;
  test::OpenDaemon d({"--max-memory", "64M"});
  const std::string ep = d.endpoint();
  // Each wait names 16 keys of 64 KiB: 1 MiB of key names parked for a
  // minute. 64 of them, within the job's quota of parked requests (4,096).
  AsNobody hog([&](Lines& io) {
    RawClient c(ep);
    io.say(c.ask(encode(1, Join{"waits", 1, false, ::getpid(), -1})));
    int refused = 0;
    std::string last;
    for (int i = 0; i < 64; ++i) {
      std::vector<std::string> keys;
      for (int k = 0; k < 16; ++k)
        keys.push_back(std::to_string(i) + "-" + std::to_string(k) +
                       std::string((64 << 10) - 16, 'w'));
      c.send(encode(i + 2, StoreWait{"waits", keys, 60000}));
      // A refusal comes at once; a parked wait says nothing. (Read as they
      // come: a client that reads nothing has its replies dropped.)
      if (std::string r = c.recv(200ms); r != "no reply") {
        refused += starts_with(r, "error=quota_exceeded");
        last = r;
      }
    }
    io.say("refused " + std::to_string(refused));
    io.say(last);
    io.hear();
  });
  LatencyProbe probe(ep);  // after the fork (latency.hpp)
  REQUIRE(starts_with(hog.hear(), "reply=rank_info"));
  const std::string refused = hog.hear(60s), last = hog.hear();
  INFO(refused << "; " << last);
  // Half of 64 MiB: about 31 parked, the rest refused at once.
  CHECK(number_after(refused, "refused") >= 32);
  CHECK(number_after(refused, "refused") <= 36);
  CHECK(last.find("musterd --max-memory") != std::string::npos);
  CHECK_OTHERS_SERVED(probe, "uid 65534's parked waits");
  AsNobody other([&](Lines& io) { victim(ep, 4, io); }, kSecondUser);
  REQUIRE(starts_with(other.hear(), "reply=rank_info"));
  std::this_thread::sleep_for(500ms);
  other.say("stop");
  CHECK(number_after(other.hear(), "failed") == 0);
  CHECK(other.hear(60s) == "taken 4");
}

TEST_CASE("one user cannot fill the state directory: its share of the state ceiling",
          "[hostile][ceilings]") {
  if (!root_for("run other users")) return;
  test::OpenDaemon d({"--max-memory", "none", "--max-state-bytes", "16M"});
  const std::string ep = d.endpoint();
  AsNobody hog([&](Lines& io) { hog_stores(ep, "disk", io); });
  LatencyProbe probe(ep);  // after the fork (latency.hpp)
  REQUIRE(starts_with(hog.hear(), "reply=rank_info"));
  const std::string stored = hog.hear(60s), refusal = hog.hear();
  hog.hear();  // the other ways to grow: refused too (as above)
  INFO(stored << "; " << refusal);
  // Alone, half of 16 MiB.
  CHECK(number_after(stored, "stored") == 7);
  CHECK(starts_with(refusal, "error=quota_exceeded"));
  CHECK(refusal.find("musterd --max-state-bytes") != std::string::npos);
  CHECK_OTHERS_SERVED(probe, "uid 65534's fill of its share of the state");
  // Another user joins and stores what the hog could not.
  AsNobody other([&](Lines& io) { victim(ep, 4, io); }, kSecondUser);
  REQUIRE(starts_with(other.hear(), "reply=rank_info"));
  other.say("stop");
  CHECK(number_after(other.hear(), "failed") == 0);
  CHECK(other.hear(60s) == "taken 4");
}

namespace {

uint64_t rss_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) << 10;
  return 0;
}

}  // namespace

TEST_CASE("replies a user never reads cannot pin more than its share of the memory ceiling",
          "[hostile][ceilings]") {
  if (!root_for("run other users")) return;
  test::OpenDaemon d({"--max-memory", "64M"});
  const std::string ep = d.endpoint();
  const uint64_t before = rss_of(d.pid());
  // A 4 MiB value, then six connections that each ask for it 12 times and
  // read nothing: 9 replies of 4 MiB queued on each (--reply-queue 8, and
  // one in flight), 216 MiB in all, where the uid may hold 32.
  AsNobody hog([&](Lines& io) {
    RawClient c(ep);
    io.say(c.ask(encode(1, Join{"pins", 1, false, ::getpid(), -1})));
    io.say(c.ask(encode(2, StoreSet{"pins", "big", std::string(4 * kMiB, 'p')})));
    // Read nothing at all: a receive queue of one message, so that ZeroMQ's
    // own thread in this process does not read them either.
    zmq::context_t ctx;
    std::vector<std::unique_ptr<zmq::socket_t>> silent;
    for (int k = 0; k < 6; ++k) {
      silent.push_back(std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer));
      silent.back()->set(zmq::sockopt::rcvhwm, 1);
      silent.back()->set(zmq::sockopt::rcvbuf, 4096);
      silent.back()->set(zmq::sockopt::linger, 0);
      silent.back()->connect(ep);
      for (int i = 0; i < 12; ++i) {
        const std::string f = encode(100 + i, StoreGet{"pins", "big", 0});
        silent.back()->send(zmq::buffer(f), zmq::send_flags::dontwait);
      }
      std::this_thread::sleep_for(200ms);
    }
    io.say("asked");
    io.hear();
  });
  LatencyProbe probe(ep);  // after the fork (latency.hpp)
  const std::string joined = hog.hear(), set = hog.hear();
  INFO(joined << "; " << set);
  REQUIRE(starts_with(joined, "reply=rank_info"));
  REQUIRE(set == "reply=ok");
  REQUIRE(hog.hear(30s) == "asked");
  std::this_thread::sleep_for(1s);
  const uint64_t after = rss_of(d.pid());
  INFO("daemon resident " << (before >> 20) << " MiB before, " << (after >> 20) << " MiB after");
  WARN("six unread connections of 4 MiB replies: daemon resident " << (before >> 20) << " -> "
                                                                   << (after >> 20) << " MiB");
  // Its share (32 MiB, its 4 MiB value counted), one queue that is
  // filling and not yet counted (9 x 4 MiB), and what the allocator keeps
  // of what was freed: 68 MiB more seen here; 192 MiB more without the
  // bound.
  // (Not under ASan: its allocator keeps what was freed in quarantine,
  // 256 MiB of it, so resident memory does not say what the daemon holds.)
  if (kLatencyChecked) CHECK(after < before + (100 * kMiB));
  CHECK_OTHERS_SERVED(probe, "six unread connections");
  CHECK(process_exists(d.pid()));
}
