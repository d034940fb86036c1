// Foreign use: a GPU running a compute process muster did not start is not
// leased (--foreign-gpu-use refuse, the default) or leased with a warning
// (warn); a rank's own child (a DataLoader worker) is not foreign, nor is
// a helper that left the rank's ancestry but not its job's cgroup. The
// [cgroup] case needs a writable cgroup v2 hierarchy and exits 77 (skip)
// without one.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <regex>
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

TEST_CASE("a GPU with a foreign process is not leased; a rank's child on another GPU is muster's") {
  bool warn = GENERATE(false, true);
  CAPTURE(warn);
  pid_t foreign = test::orphan_sleeper();
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

TEST_CASE(
    "a helper that left its rank's ancestry but not its job's cgroup is muster's, not foreign",
    "[cgroup]") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  std::string how = Client({d.endpoint()}).status().containment;
  if (how.rfind("cgroup ", 0) != 0) {
    std::cout << "SKIP: no writable cgroup v2 hierarchy here: the daemon says containment is "
              << how << "\n";
    std::exit(77);
  }
  // The rank (one, on a GPU) starts a helper with `setsid -f`, which
  // reparents it to muster run (a subreaper, not a rank): by ancestry it
  // is no rank's, but it was born in the job's cgroup and stays there.
  test::Process run({test::program("MUSTER_TEST_MUSTER"), "run", "-n", "1", "/bin/sh", "-c",
                     "echo $$; /usr/bin/setsid -f /bin/sh -c 'echo $$; exec /bin/sleep 1000'; "
                     "exec /bin/sleep 1000"},
                    {{"MUSTER_ENDPOINT", d.endpoint()}});
  static const std::regex prefix("^\\[rank\\d+\\]: ");
  std::vector<pid_t> pids;
  while (pids.size() < 2) {
    auto line = run.read_line(20s);
    REQUIRE(line);
    pids.push_back(std::stoi(std::regex_replace(*line, prefix, "")));
  }
  pid_t rank = pids[0], helper = pids[1];
  REQUIRE(test::eventually(
      [&] { return test::parent_of(helper) != 0 && test::parent_of(helper) != rank; }, 5s));
  INFO("rank " << rank << ", helper " << helper << " (parent " << test::parent_of(helper) << ")");
  // A process of this test (no job's cgroup, no rank's descendant) beside
  // it: the control that a cgroup test which always said "ours" would fail.
  pid_t stranger = test::orphan_sleeper();
  // Both show up on GPUs the job does not hold (it holds GPU 0).
  node.set(test::eight_gpu_node(
      {{5, "procs=" + std::to_string(helper)}, {6, "procs=" + std::to_string(stranger)}}));
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() == 8);
  CHECK(s.devices[5].health == "ok");
  CHECK(s.devices[6].health == "foreign_use");
  CHECK_THAT(s.devices[6].reason, Catch::Contains("pid " + std::to_string(stranger)));
  // A second job may take GPU 5 (the helper is the first job's business,
  // and its GPU is still free), never GPU 6.
  Client b({d.endpoint()});
  std::set<int> got;
  std::vector<std::unique_ptr<Client>> ranks;
  for (int r = 0; r < 6; ++r) {
    ranks.push_back(std::make_unique<Client>(muster::ClientOptions{d.endpoint()}));
    got.insert(ranks.back()->join({"b", 6, true, r}).device);
  }
  CHECK(got == std::set<int>{1, 2, 3, 4, 5, 7});
  ::kill(stranger, SIGKILL);
  run.signal(SIGTERM);
  run.wait(10s);
  // The helper goes with the job's cgroup.
  CHECK(test::eventually([&] { return !test::process_exists(helper); }, 5s));
}
