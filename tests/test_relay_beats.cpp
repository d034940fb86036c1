// Once a world is formed, heartbeats, ended ranks and leaves go through the
// relay tree like barriers and key waits do: the coordinator hears its own
// children in the tree, which carry up whom they heard below (and how long
// ago) and whose ranks and parts of the job ended (bench/bench_swarm.cpp
// measures what that saves at 100,000 ranks).
//
// Nine daemons of one rank each, tree width 2: nodes 0 and 1 under the
// coordinator (daemon 0, which also runs node 0); 2 and 3 under node 0, 4
// and 5 under node 1, 6 and 7 under node 2, 8 under node 3. The
// coordinator logs at debug level which node each heartbeat, rank_exited
// and node_leave it handled came from.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/cluster.hpp"
#include "support/process.hpp"

using namespace muster::test;
using namespace std::chrono_literals;

namespace {

constexpr int kNodes = 9;

struct Tree {
  TempDir logs;
  Cluster c{0, 2};
  std::string log0 = logs.path() + "/coordinator.log";
  Tree() {
    c.nproc = "1";
    add_listening(c, kNodes, "2", log0);
  }
  std::vector<std::unique_ptr<Process>> run(const std::string& job,
                                            const std::vector<std::string>& worker) {
    std::vector<std::unique_ptr<Process>> runs;
    for (int i = 0; i < kNodes; ++i)
      runs.push_back(
          c.run(i, job, std::to_string(kNodes), {"--node-rank", std::to_string(i)}, worker));
    return runs;
  }
  std::string log() const {
    std::ifstream in(log0);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Lines of the coordinator's log with `what` followed by daemon i's node
  // id (host:runtime dir).
  int count(const std::string& text, const std::string& what, int i) const {
    const std::string dir = ":" + c.daemons[i]->runtime_dir() + " ";
    int n = 0;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      if (auto at = line.find(what);
          at != std::string::npos && line.find(dir, at) != std::string::npos)
        ++n;
    return n;
  }
};

}  // namespace

TEST_CASE(
    "a formed world's heartbeats, ended ranks and leaves reach the coordinator through relays",
    "[cluster]") {
  Tree t;
  auto runs = t.run("beats", {"linger", "4000"});  // 8 heartbeat periods of the 2 s timeout
  for (int i = 0; i < kNodes; ++i) {
    auto text = runs[i]->read_all(90s);
    INFO("node " << i << ":\n" << text);
    REQUIRE(runs[i]->wait(10s) == 0);
    CHECK(text.find("lingered=ok") != std::string::npos);
  }
  // Every node's leave arrived (the round ends only then), though only
  // nodes 0 and 1 told the coordinator anything themselves.
  bool ended =
      eventually([&] { return t.log().find("ended on every node") != std::string::npos; }, 20s);
  const std::string text = t.log();
  INFO("coordinator log:\n" << text);
  REQUIRE(ended);
  const std::string beat = "heartbeat from ", leave = "node_leave from ";
  // The coordinator's children beat every 16th of the timeout while they
  // hear from below: the log has them, so silence below is no accident.
  CHECK(t.count(text, beat, 0) >= 8);
  CHECK(t.count(text, beat, 1) >= 8);
  for (int i = 2; i < kNodes; ++i) {
    INFO("node " << i);
    // At most two: one sent before its World came and handled after the
    // round closed, one its parent could not take before its own World.
    // Beating the coordinator itself, it would send eight.
    CHECK(t.count(text, beat, i) <= 2);
    CHECK(t.count(text, leave, i) == 0);
  }
  // Each rank's end was told exactly once, in batches.
  int ranks = 0, batches = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (auto at = line.find("rank_exited: rank "); at != std::string::npos) {
      ++batches;
      auto more = line.find(" and ", at);
      REQUIRE(more != std::string::npos);
      ranks += 1 + std::stoi(line.substr(more + 5));
    }
  CHECK(ranks == kNodes);
  CHECK(batches < kNodes);
}

TEST_CASE("a node the coordinator hears of only through relays is found lost when its daemon dies",
          "[cluster]") {
  Tree t;
  auto runs = t.run("lost-below", {"hold-nosigterm"});
  for (auto& r : runs) {
    int shards = 0;
    while (shards < 1) {
      auto line = r->read_line(60s);
      REQUIRE(line);
      if (line->find("shard=") != std::string::npos) ++shards;
    }
  }
  std::this_thread::sleep_for(300ms);  // into the held wait
  // Node 8 is two relays below the coordinator (under node 3, under node 0).
  kill(t.c.daemons[8]->pid(), SIGKILL);
  for (int i = 0; i < 8; ++i) {
    auto text = runs[i]->read_all(40s);
    INFO("node " << i << ":\n" << text);
    INFO("coordinator log:\n" << t.log());
    CHECK(text.find("wait_error=peer_exited") != std::string::npos);
    CHECK(text.find("node 8") != std::string::npos);
    CHECK(text.find("lost") != std::string::npos);
    auto code = runs[i]->wait(10s);
    REQUIRE(code);
    CHECK(*code != 0);
  }
  runs[8]->read_all(30s);
  CHECK(runs[8]->wait(10s));
}
