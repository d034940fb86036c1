// The coordinating daemon killed with SIGKILL mid-job and started again on
// its runtime directory: its rounds, generations and the job's global store
// come back from its state file, the node daemons send their requests in
// flight again, and the job finishes with every value intact and no rank
// restarted. Kept down past --peer-timeout, every rank of the other node
// fails with a sentence naming the coordinator.
#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <thread>

#include "support/cluster.hpp"

using namespace muster::test;
using namespace std::chrono_literals;

namespace {

// Both nodes' output, line by line, read as it comes.
struct Lines {
  std::vector<Process*> runs;
  std::vector<std::string> all;
  std::string text() const {
    std::string t;
    for (const auto& l : all) t += l + "\n";
    return t;
  }
  size_t count(const std::string& what) const {
    size_t n = 0;
    for (const auto& l : all) n += l.find(what) != std::string::npos;
    return n;
  }
  // Reads until `n` lines hold `what` (false after the timeout).
  bool wait_for(const std::string& what, size_t n, std::chrono::seconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (count(what) < n) {
      if (std::chrono::steady_clock::now() > end) return false;
      for (auto* r : runs)
        if (auto line = r->read_line(50ms)) all.push_back(*line);
    }
    return true;
  }
};

void kill_and_restart(TestDaemon& d) {
  d.kill9();
  d.start();
}

void touch(const std::string& path) {
  std::ofstream(path) << "go\n";
}

}  // namespace

TEST_CASE(
    "the coordinator killed mid-rendezvous, barrier, key wait and broadcast: the job ends "
    "intact",
    "[cluster][restart]") {
  // Long enough a peer timeout for a restart under a sanitizer.
  Cluster c(2, -1, {}, "20");
  TempDir go;
  const std::string size = std::to_string((size_t{96} << 20) + 13);
  std::vector<std::string> args = {"coord-restart", go.path(), size};
  // Rendezvous: node 1 joins first; the coordinator dies with the round
  // open, and node 0 joins the restarted one.
  auto run1 = c.run(1, "phoenix", "2", {"--node-rank", "1"}, args);
  std::this_thread::sleep_for(1500ms);
  kill_and_restart(*c.daemons[0]);
  auto run0 = c.run(0, "phoenix", "2", {"--node-rank", "0"}, args);
  Lines out{{run0.get(), run1.get()}, {}};
  // Barrier: three ranks wait in it when the coordinator dies.
  REQUIRE(out.wait_for("at=barrier", 4, 60s));
  std::this_thread::sleep_for(500ms);
  kill_and_restart(*c.daemons[0]);
  touch(go.path() + "/barrier");
  // Key wait: three ranks wait for the key the last one sets.
  REQUIRE(out.wait_for("at=key", 4, 60s));
  std::this_thread::sleep_for(500ms);
  kill_and_restart(*c.daemons[0]);
  touch(go.path() + "/key");
  // Broadcasts: killed a little after each of the last three began, later
  // each time, so that at least one kill lands while chunks flow. Counted
  // from the first rank that says it began: by the fourth's line (read in
  // turns of 50 ms) an idle machine had finished all three before any kill.
  int n = 1;
  for (auto delay : {40ms, 100ms, 200ms}) {
    REQUIRE(out.wait_for("at=bcast n=" + std::to_string(n++), 1, 60s));
    std::this_thread::sleep_for(delay);
    kill_and_restart(*c.daemons[0]);
  }
  bool ended = out.wait_for("count=", 4, 120s);
  INFO(out.text());
  REQUIRE(ended);
  // Chunks died with the coordinator at least once: every rank started
  // that broadcast again and got the root's bytes.
  CHECK(out.count("restarted=0") == 0);
  CHECK(out.count("barrier=ok") == 4);
  CHECK(out.count("key=value-4") == 4);
  CHECK(out.count("bcast=ok") == 16);
  CHECK(out.count("bcast=WRONG") == 0);
  CHECK(out.count("count=4") == 4);  // each add applied once
  // No rank started twice: one line of joining each, one generation.
  CHECK(out.count("rank=") == 4);
  CHECK(out.count("generation=0") == 4);
  for (auto* r : out.runs) CHECK(r->wait(30s) == 0);
}

TEST_CASE(
    "the coordinator down past the peer timeout: every rank of the other node fails naming "
    "it",
    "[cluster][restart]") {
  Cluster c(2, -1, {}, "2");
  TempDir go;
  std::vector<std::string> args = {"coord-restart", go.path(), "4096"};
  auto run0 = c.run(0, "orphan", "2", {"--node-rank", "0"}, args);
  auto run1 = c.run(1, "orphan", "2", {"--node-rank", "1"}, args);
  Lines out{{run0.get(), run1.get()}, {}};
  REQUIRE(out.wait_for("at=barrier", 4, 60s));
  std::this_thread::sleep_for(300ms);
  c.daemons[0]->kill9();
  // Node 1's two ranks wait in the barrier; their daemon gives up on the
  // coordinator after 2 s of silence.
  auto text = run1->read_all(60s);
  INFO(text);
  // The ranks' barrier fails with peer_exited; their launcher, told of the
  // broken world at the same moment, may stop them before they print it
  // (seen under ASan), and says why itself.
  CHECK(
      (text.find("error=peer_exited") != std::string::npos ||
       text.find("the job's world broke (lost contact with the coordinator") != std::string::npos));
  CHECK(text.find("lost contact with the coordinator " + c.coordinator()) != std::string::npos);
  auto code = run1->wait(30s);
  REQUIRE(code);
  CHECK(*code != 0);
  run0->signal(SIGTERM);
  run0->wait(30s);
}

TEST_CASE("the coordinator killed while its own node waits in the rendezvous: the world forms",
          "[cluster][restart]") {
  Cluster c(2, -1, {}, "20");
  // Node 0's launcher is the one waiting (its join went to its own daemon,
  // over the peer port); node 1 comes after the restart.
  auto run0 = c.run(0, "phoenix0", "2", {"--node-rank", "0"});
  std::this_thread::sleep_for(1500ms);
  kill_and_restart(*c.daemons[0]);
  auto run1 = c.run(1, "phoenix0", "2", {"--node-rank", "1"});
  Lines out{{run0.get(), run1.get()}, {}};
  bool ended = out.wait_for("shard=", 4, 90s);
  INFO(out.text());
  REQUIRE(ended);
  CHECK(out.count("store=ok") == 4);
  CHECK(out.count("rank=") == 4);  // no worker started twice
  CHECK(out.count("world=4") == 4);
  for (auto* r : out.runs) CHECK(r->wait(30s) == 0);
}
