// A multi-node rendezvous that waits for nodes which never come: muster run
// says what it waits for, and Ctrl-C or SIGTERM end the wait at once.
#include <catch2/catch.hpp>

#include <signal.h>

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
      if (line->find("still waiting after") != std::string::npos) {
        progress = true;
        break;
      }
    }
    INFO(text);
    REQUIRE(progress);
    CHECK_THAT(text, Catch::Contains("rendezvous lonely" + std::to_string(sig) +
                                     ": joining through " + cluster.coordinator() +
                                     " (forms at 3 nodes, or at 2 after a last call of 7 s)"));
    p->signal(sig);
    text += p->read_all(10s);
    // Well before the default 600 s rendezvous timeout.
    CHECK(p->wait(10s) == 128 + sig);
    CHECK_THAT(text, Catch::Contains(std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") +
                                     ": stopped waiting for the rendezvous of lonely"));
  }
}
