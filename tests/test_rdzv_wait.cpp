// A multi-node rendezvous that waits for nodes which never come: muster run
// says which nodes joined and what it waits for (muster status too), and
// Ctrl-C or SIGTERM end the wait at once.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <regex>

#include "muster/status.hpp"
#include "support/cluster.hpp"

using namespace std::chrono_literals;
using muster::test::Process;
namespace test = muster::test;

TEST_CASE("Ctrl-C and SIGTERM end a waiting rendezvous, which said what it waits for") {
  test::Cluster cluster(1);
  for (int sig : {SIGINT, SIGTERM}) {
    INFO(sig);
    auto p = cluster.run(0, "lonely" + std::to_string(sig), "2:3", {"--last-call", "7"});
    std::string text;
    bool progress = false;
    while (auto line = p->read_line(30s)) {
      text += *line + "\n";
      if (line->find("1 of 3 nodes") != std::string::npos) {
        progress = true;
        break;
      }
    }
    INFO(text);
    REQUIRE(progress);
    CHECK_THAT(text, Catch::Contains("rendezvous lonely" + std::to_string(sig) +
                                     ": joining through " + cluster.coordinator() +
                                     " (forms at 3 nodes, or at 2 after a last call of 7 s)"));
    // The coordinator's word: this node joined, under the host name.
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    CHECK_THAT(text, Catch::Contains(": 1 of 3 nodes (" + std::string(host) +
                                     "), waiting for 2 more; forms at 3, or at 2 after a last "
                                     "call of 7 s (waited "));
    p->signal(sig);
    text += p->read_all(10s);
    // Well before the default 600 s rendezvous timeout.
    CHECK(p->wait(10s) == 128 + sig);
    CHECK_THAT(text, Catch::Contains(std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") +
                                     ": stopped waiting for the rendezvous of lonely"));
  }
}

namespace {

// Lines of p up to (and with) the first that contains `what`; "" when none
// came within the timeout.
std::string lines_until(Process& p, const std::string& what, std::chrono::seconds timeout) {
  std::string text;
  while (auto line = p.read_line(timeout)) {
    text += *line + "\n";
    if (line->find(what) != std::string::npos) return text;
  }
  return "";
}

// The seconds a "... after the last call in N s" sentence counts down.
int last_call_in(const std::string& text) {
  std::smatch m;
  REQUIRE(std::regex_search(text, m, std::regex("after the last call in ([0-9]+) s")));
  return std::stoi(m[1]);
}

}  // namespace

TEST_CASE("a forming rendezvous names the nodes that joined, in muster run and muster status") {
  test::Cluster cluster(3, -1, {"node0", "node1", "node3"});
  std::vector<std::unique_ptr<Process>> runs;
  for (int node = 0; node < 3; ++node)
    runs.push_back(cluster.run(node, "run42", "2:4", {"--last-call", "600"}));
  const std::string three =
      "3 of 4 nodes (node0, node1, node3), waiting for 1 more; forms at 4, "
      "or at 2 after the last call in ";
  // Every node's launcher, whatever its own name, sees the whole round.
  for (int node : {1, 2}) {
    INFO(node);
    std::string text = lines_until(*runs[node], "3 of 4 nodes", 60s);
    INFO(text);
    CHECK_THAT(text, Catch::Contains("muster run: rendezvous run42: " + three));
    int left = last_call_in(text.substr(text.rfind("3 of 4 nodes")));
    CHECK(left >= 1);
    CHECK(left <= 600);
  }
  // muster status on node 2 (not the coordinator) says the same, as a
  // table and as JSON.
  std::map<std::string, std::string> env{{"MUSTER_ENDPOINT", cluster.daemons[2]->endpoint()}};
  Process table({test::program("MUSTER_TEST_MUSTER"), "status"}, env);
  auto text = table.read_all(10s);
  CHECK(table.wait(5s) == 0);
  CHECK_THAT(text, Catch::Contains("Job run42"));
  CHECK_THAT(text, Catch::Contains("  rendezvous: " + three));
  Process json({test::program("MUSTER_TEST_MUSTER"), "status", "--json"}, env);
  auto doc = json.read_all(10s);
  CHECK(json.wait(5s) == 0);
  CHECK_THAT(doc, Catch::Contains(R"("rendezvous":{"nodes":3,"joined":["node0","node1","node3"],)"
                                  R"("min_nodes":2,"max_nodes":4,"last_call_s":600.0,)"
                                  R"("closes_in_s":)"));
  CHECK_THAT(doc, Catch::Contains(R"("progress":")" + three));
  for (auto& p : runs) p->signal(SIGTERM);
  for (auto& p : runs) CHECK(p->wait(10s) == 128 + SIGTERM);
}

TEST_CASE("the progress of a large round names its first nodes and counts the rest") {
  muster::Forming f;
  f.nodes = 40;
  for (int i = 0; i < 32; ++i) f.joined.push_back("n" + std::to_string(100 + i));
  f.min_nodes = 2;
  f.max_nodes = 64;
  f.last_call_ms = 30000;
  auto text = muster::to_string(f);
  CHECK_THAT(text, Catch::StartsWith("40 of 64 nodes (n100, n101, "));
  CHECK_THAT(text, Catch::EndsWith(", n131 and 8 more), waiting for 24 more; forms at 64, or "
                                   "at 2 after a last call of 30 s"));
  f.closes_in_ms = 11200;  // counts down in whole seconds, rounded up
  CHECK_THAT(muster::to_string(f), Catch::EndsWith("or at 2 after the last call in 12 s"));
  f.min_nodes = 64;  // no last call: a fixed size
  CHECK_THAT(muster::to_string(f), Catch::EndsWith("waiting for 24 more; forms at 64"));
  CHECK(muster::to_string(muster::Forming{}).empty());  // no word from the coordinator
}
