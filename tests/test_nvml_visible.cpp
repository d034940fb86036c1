// The right GPU on every form of CUDA_VISIBLE_DEVICES, through the NVML
// double and a fake driver tree (MUSTER_TEST_SYSROOT): integers count the
// GPUs CUDA sees in this process — under a cgroup or container that
// allows a subset (Slurm's ConstrainDevices), only those, in PCI order —
// not NVML's indices; UUIDs and prefixes name only GPUs CUDA sees; MIG
// instances are refused with a sentence. And the leased GPU's UUID
// reaches the C API.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <set>

#include "muster/client.hpp"
#include "muster/muster.h"
#include "support/muster_cli.hpp"
#include "support/nvml_node.hpp"
#include "support/nvml_ranks.hpp"
#include "support/process.hpp"

using muster::Client;
using namespace std::chrono_literals;
namespace test = muster::test;

namespace {

// The driver's view of the 8-GPU node under a cgroup that allows only
// `allowed` (NVML indices): every GPU's /proc/driver/nvidia entry (minor
// numbers 10+i, so that nothing can pass by taking a minor for an index),
// device nodes only for the allowed ones, as a container leaves them (a
// cgroup refuses the open instead: the same for CUDA).
void cgroup_subset(const std::string& root, const std::set<int>& allowed) {
  test::mkdirs(root + "/dev");
  for (int i = 0; i < 8; ++i) {
    unsigned bus = 0;
    std::sscanf(test::node_bus(i).c_str(), "00000000:%x", &bus);
    char name[32];
    std::snprintf(name, sizeof name, "0000:%02x:00.0", bus);
    std::string dir = root + "/proc/driver/nvidia/gpus/" + name;
    test::mkdirs(dir);
    test::spit(dir + "/information",
               "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\n"
               "Device Minor: \t " +
                   std::to_string(10 + i) + "\n");
    if (allowed.count(i)) test::spit(root + "/dev/nvidia" + std::to_string(10 + i), "");
  }
}

// `muster run -n N` of ranks that print MUSTER_DEVICE and their rank info,
// under CUDA_VISIBLE_DEVICES=cvd ("-": unset) and the fake tree.
test::Ran run_ranks(const test::TestDaemon& d, const test::NvmlNode& node, const std::string& cvd,
                    int n) {
  std::vector<std::string> args{
      "--nproc-per-node",
      std::to_string(n),
      "--",
      "sh",
      "-c",
      "echo \"env device=$MUSTER_DEVICE\"; exec \"$0\" \"$MUSTER_JOB_ID\" \"$LOCAL_WORLD_SIZE\" "
      "\"$LOCAL_RANK\"",
      test::program("MUSTER_TEST_RANK")};
  std::map<std::string, std::string> env{{"MUSTER_ENDPOINT", d.endpoint()},
                                         {"MUSTER_TEST_SYSROOT", node.root()}};
  if (cvd != "-") env["CUDA_VISIBLE_DEVICES"] = cvd;
  return test::run_leasing(d, args, env, n);
}

}  // namespace

TEST_CASE(
    "under a cgroup that allows GPUs 2,3,5,6, CUDA_VISIBLE_DEVICES=1,2 are GPUs 3 and 5, as "
    "ordinals 0 and 1") {
  test::NvmlNode node(test::eight_gpu_node());
  cgroup_subset(node.root(), {2, 3, 5, 6});
  test::TestDaemon d({}, node.env());
  auto r = run_ranks(d, node, "1,2", 2);
  INFO(r.output);
  CHECK(r.leased == std::vector<int64_t>{3, 5});
  CHECK(r.lines == std::set<std::string>{"env device=0", "env device=1", test::rank_line(0, 0),
                                         test::rank_line(1, 1)});
}

TEST_CASE("under a cgroup subset without CUDA_VISIBLE_DEVICES only the allowed GPUs are leased") {
  test::NvmlNode node(test::eight_gpu_node());
  cgroup_subset(node.root(), {5, 6});
  test::TestDaemon d({}, node.env());
  auto r = run_ranks(d, node, "-", 2);
  INFO(r.output);
  CHECK(r.leased == std::vector<int64_t>{5, 6});
  // CUDA numbers them 0 and 1 here, not 5 and 6.
  CHECK(r.lines == std::set<std::string>{"env device=0", "env device=1", test::rank_line(0, 0),
                                         test::rank_line(1, 1)});
}

TEST_CASE("a UUID of a GPU the cgroup hides names no GPU, as for CUDA") {
  test::NvmlNode node(test::eight_gpu_node());
  cgroup_subset(node.root(), {2, 3});
  test::TestDaemon d({}, node.env());
  test::Process run(test::muster_cmd("run", {"--nproc-per-node", "1", "--", "true"}),
                    {{"MUSTER_ENDPOINT", d.endpoint()},
                     {"MUSTER_TEST_SYSROOT", node.root()},
                     {"CUDA_VISIBLE_DEVICES", test::node_uuid(1)}},
                    true);
  auto out = run.read_all(20s);
  CHECK(run.wait(10s) == 1);
  CHECK_THAT(out, Catch::Contains("CUDA_VISIBLE_DEVICES='" + test::node_uuid(1) +
                                  "' leaves none of this node's GPUs visible"));
}

TEST_CASE("a MIG instance in CUDA_VISIBLE_DEVICES is refused with a sentence") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  const std::string mig = "MIG-1a2b3c4d-0000-4000-8000-0000000000aa";
  test::Process run(test::muster_cmd("run", {"--nproc-per-node", "1", "--", "true"}),
                    {{"MUSTER_ENDPOINT", d.endpoint()}, {"CUDA_VISIBLE_DEVICES", mig}}, true);
  auto out = run.read_all(20s);
  CHECK(run.wait(10s) == 1);
  CHECK_THAT(out,
             Catch::Contains("names a MIG instance (" + mig + "): muster leases whole GPUs only"));
  // A rank that joins by itself under it is told the same.
  const std::string refused = test::join_alone_under(d, mig);
  CHECK_THAT(refused, Catch::StartsWith("no_device: CUDA_VISIBLE_DEVICES='" + mig +
                                        "' names a MIG instance"));
}

TEST_CASE("the C API gives the leased GPU's UUID") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  muster_client* c = muster_client_new(d.endpoint().c_str());
  REQUIRE(c);
  muster_rank_info info{};
  char uuid[96] = "x";
  CHECK(muster_device_uuid(c, uuid, sizeof uuid) != 0);  // not joined yet
  // GPU 0 taken first: the C API's rank gets GPU 1.
  Client other({d.endpoint()});
  CHECK(other.join({"other", 1, true, 0}).device == 0);
  REQUIRE(muster_join(c, "capi", 1, 1, 0, &info) == 0);
  CHECK(info.device == 1);
  REQUIRE(muster_device_uuid(c, uuid, sizeof uuid) == 0);
  CHECK(std::string(uuid) == test::node_uuid(1));
  char small[8];
  CHECK(muster_device_uuid(c, small, sizeof small) != 0);
  CHECK_THAT(muster_error_message(c), Catch::Contains("holds 8 bytes"));
  muster_client_free(c);
}
