// GPU placement end to end (issue #21): a private musterd reads the NVML
// double's topology and hands out the GPU sets an expert would choose —
// through the launcher's reservation and through muster run's workers.
// The choices themselves, case by case, are test_placement.cpp's.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "muster/client.hpp"
#include "muster/error.hpp"
#include "muster/launcher.hpp"
#include "support/muster_cli.hpp"
#include "support/nvml_node.hpp"
#include "support/process.hpp"

using muster::Client;
using namespace std::chrono_literals;
namespace test = muster::test;

namespace {

// The 8-GPU two-socket node with PCIe switches and NVLinks pairing (0,1)
// (2,3) (4,5) (6,7); extra[i] goes on GPU i's line.
std::string paired_node(std::map<int, std::string> extra = {}) {
  for (int i = 0; i < 8; ++i) extra[i] += " switch=sw" + std::to_string(i / 2);
  std::string s = test::eight_gpu_node(extra);
  for (int i = 0; i < 8; i += 2)
    s += "nvlink a=" + test::node_uuid(i) + " b=" + test::node_uuid(i + 1) + " count=4\n";
  return s;
}

// Eight GPUs on NVSwitches: 18 links each.
std::string nvswitch_node() {
  std::string s = test::eight_gpu_node();
  for (int i = 0; i < 8; ++i)
    s += "nvswitch gpu=" + test::node_uuid(i) + " links=18 bus=00000000:0" +
         std::to_string(i % 4 + 1) + ":00.0\n";
  return s;
}

std::vector<int> reserve(const test::TestDaemon& d, const std::string& job, uint32_t n) {
  Client c({d.endpoint()});
  return muster::reserve(c, job, n, true, {}, getpid()).devices;
}

std::set<int> as_set(const std::vector<int>& v) {
  return {v.begin(), v.end()};
}

}  // namespace

TEST_CASE("on NVLink pairs, 2 ranks get a pair and 4 ranks one socket's four") {
  test::NvmlNode node(paired_node());
  test::TestDaemon d({}, node.env());
  CHECK(reserve(d, "pair", 2) == std::vector<int>{0, 1});
  // The next 4-rank job gets socket 1 whole, not 2,3 with 4,5.
  CHECK(as_set(reserve(d, "four", 4)) == std::set<int>{4, 5, 6, 7});
  CHECK(reserve(d, "last", 2) == std::vector<int>{2, 3});
}

TEST_CASE("a 4-rank job on a fresh node takes socket 0's four in ring order") {
  test::NvmlNode node(paired_node());
  test::TestDaemon d({}, node.env());
  CHECK(reserve(d, "four", 4) == std::vector<int>{0, 1, 2, 3});
}

TEST_CASE("with GPU 2 foreign and GPU 5 failed, 2 ranks get (0,1) or (6,7), 6 ranks the six left") {
  pid_t foreign = test::orphan_sleeper();
  test::NvmlNode node(paired_node({{2, "procs=" + std::to_string(foreign)}, {5, "ecc=2"}}));
  test::TestDaemon d({}, node.env());
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() == 8);
  CHECK(s.devices[2].health == "foreign_use");
  CHECK(s.devices[5].health == "quarantined");
  auto two = as_set(reserve(d, "two", 2));
  CHECK((two == std::set<int>{0, 1} || two == std::set<int>{6, 7}));
  test::TestDaemon d2({}, node.env());
  CHECK(as_set(reserve(d2, "six", 6)) == std::set<int>{0, 1, 3, 4, 6, 7});
  ::kill(foreign, SIGKILL);
}

TEST_CASE("on an NVSwitch node every set is equal: the lowest free GPUs") {
  test::NvmlNode node(nvswitch_node());
  test::TestDaemon d({}, node.env());
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() == 8);
  REQUIRE(s.devices[0].nvlinks.size() == 8);
  CHECK(s.devices[0].nvlinks[7] == 18);
  CHECK(reserve(d, "three", 3) == std::vector<int>{0, 1, 2});
  CHECK(reserve(d, "five", 5) == std::vector<int>{3, 4, 5, 6, 7});
}

TEST_CASE("muster run's workers get their placed GPUs, local rank 0 on the lowest") {
  test::NvmlNode node(paired_node());
  test::TestDaemon d({}, node.env());
  // A 2-rank job holds 0 and 1 while muster run starts a 4-rank job.
  CHECK(reserve(d, "holder", 2) == std::vector<int>{0, 1});
  test::Process run(
      test::muster_cmd("run", {"--nproc-per-node", "4", "--numa-binding", "none", "--", "sh", "-c",
                               "echo \"placed $LOCAL_RANK $MUSTER_DEVICE\""}),
      {{"MUSTER_ENDPOINT", d.endpoint()}}, true);
  std::string out = run.read_all(30s);
  REQUIRE(run.wait(30s) == 0);
  for (auto [rank, gpu] : {std::pair{0, 4}, {1, 5}, {2, 6}, {3, 7}})
    CHECK_THAT(out, Catch::Contains("placed " + std::to_string(rank) + " " + std::to_string(gpu)));
}
