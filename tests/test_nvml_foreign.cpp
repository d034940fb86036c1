// Foreign use: a GPU running a compute process muster did not start is not
// leased (--foreign-gpu-use refuse, the default) or leased with a warning
// (warn); a rank's own child (a DataLoader worker) is not foreign.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <memory>
#include <set>

#include "muster/client.hpp"
#include "muster/error.hpp"
#include "support/nvml_node.hpp"
#include "support/process.hpp"

using muster::Client;
using muster::Error;
using muster::ErrorCode;
using namespace std::chrono_literals;
namespace test = muster::test;

namespace {

// A process that is no descendant of this test (which is a rank below):
// sh starts sleep in the background and exits, so sleep is reparented.
pid_t orphan_sleeper() {
  test::Process sh({"/bin/sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"});
  auto line = sh.read_line(10s);
  REQUIRE(line);
  sh.wait(10s);
  return static_cast<pid_t>(std::stol(*line));
}

}  // namespace

TEST_CASE("a GPU with a foreign process is not leased; a rank's child on another GPU is muster's") {
  bool warn = GENERATE(false, true);
  CAPTURE(warn);
  pid_t foreign = orphan_sleeper();
  // This test process is rank 0 of job "a" (GPU 0 it will hold); its child
  // runs on GPU 5, as a DataLoader worker of a previous generation might.
  test::Process child({"/bin/sleep", "60"});
  test::NvmlNode node(test::eight_gpu_node(
      {{2, "procs=" + std::to_string(foreign)}, {5, "procs=" + std::to_string(child.pid())}}));
  std::vector<std::string> args;
  if (warn) args = {"--foreign-gpu-use", "warn"};
  test::TestDaemon d(args, node.env());
  Client a({d.endpoint()});
  CHECK(a.join({"a", 1, true, 0}).device == 0);
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() == 8);
  CHECK(s.devices[2].health == "foreign_use");
  CHECK_THAT(s.devices[2].reason, Catch::Contains("pid " + std::to_string(foreign)));
  CHECK(s.devices[5].health == "ok");
  // Job "b" takes every GPU it may: 1, 3, 4, 5, 6, 7, and 2 only with warn.
  std::vector<std::unique_ptr<Client>> ranks;
  std::set<int> got;
  std::string refused;
  for (int r = 0; r < 7; ++r) {
    ranks.push_back(std::make_unique<Client>(muster::ClientOptions{d.endpoint()}));
    try {
      got.insert(ranks.back()->join({"b", 7, true, r}).device);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kNoDevice);
      refused = e.what();
    }
  }
  if (warn) {
    CHECK(got == std::set<int>{1, 2, 3, 4, 5, 6, 7});
    CHECK(refused.empty());
  } else {
    CHECK(got == std::set<int>{1, 3, 4, 5, 6, 7});
    CHECK_THAT(refused, Catch::Contains("GPU 2 runs pid " + std::to_string(foreign)));
  }
  ::kill(foreign, SIGKILL);
}
