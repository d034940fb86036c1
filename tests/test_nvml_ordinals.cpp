// Device ordinals under a scheduler's or container's CUDA_VISIBLE_DEVICES,
// on the 8-GPU node of the NVML double (whose scenario lists its GPUs out
// of PCI bus order, as CUDA's fastest-first order might): only the visible
// GPUs are leased, --devices counts positions in the list, and a rank's
// ordinal (MUSTER_DEVICE, rank_info().device) is its GPU's position in it;
// without one, ordinals are NVML indices (PCI bus order).
#include <catch2/catch.hpp>

#include <signal.h>

#include <cstdlib>
#include <set>

#include "muster/client.hpp"
#include "muster/error.hpp"
#include "support/muster_cli.hpp"
#include "support/nvml_node.hpp"
#include "support/nvml_ranks.hpp"
#include "support/process.hpp"

using muster::Client;
using namespace std::chrono_literals;
namespace test = muster::test;

namespace {

// `muster run --nproc-per-node N ARGS -- (print the env, join, print the
// rank info)` under CUDA_VISIBLE_DEVICES=cvd ("-": unset); the GPUs it
// leased, read while the ranks run, then stopped.
test::Ran run_ranks(const test::TestDaemon& d, const std::string& cvd, int n,
                    std::vector<std::string> args) {
  args.insert(args.begin(), {"--nproc-per-node", std::to_string(n)});
  args.insert(args.end(),
              {"--", "sh", "-c",
               "echo \"env device=$MUSTER_DEVICE order=$CUDA_DEVICE_ORDER\"; exec \"$0\" "
               "\"$MUSTER_JOB_ID\" \"$LOCAL_WORLD_SIZE\" \"$LOCAL_RANK\"",
               test::program("MUSTER_TEST_RANK")});
  return test::run_leasing(
      d, args, {{"MUSTER_ENDPOINT", d.endpoint()}, {"CUDA_VISIBLE_DEVICES", cvd == "-" ? "" : cvd}},
      n);
}

// r's job held these GPUs, and its ranks printed these lines (their
// environment's, then their rank info).
void check_ran(const test::Ran& r, const std::vector<int64_t>& leased,
               const std::set<std::string>& lines) {
  INFO(r.output);
  CHECK(r.leased == leased);
  CHECK(r.lines == lines);
}

}  // namespace

TEST_CASE(
    "under CUDA_VISIBLE_DEVICES=2,5 (or their UUIDs) only GPUs 2 and 5 are leased, as "
    "ordinals 0 and 1") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  for (std::string cvd : {std::string("2,5"), test::node_uuid(2) + "," + test::node_uuid(5),
                          // a prefix that names one GPU, as CUDA accepts
                          test::node_uuid(2) + ",GPU-6b1e2c3d-0000-4000-8000-000000000005"}) {
    INFO("CUDA_VISIBLE_DEVICES=" << cvd);
    auto r = run_ranks(d, cvd, 2, {});
    check_ran(r, {2, 5},
              {"env device=0 order=PCI_BUS_ID", "env device=1 order=PCI_BUS_ID",
               test::rank_line(0, 0), test::rank_line(1, 1)});
    REQUIRE(test::eventually([&] { return Client({d.endpoint()}).status().jobs.empty(); }, 10s));
  }
}

TEST_CASE("--devices counts positions in CUDA_VISIBLE_DEVICES, in its order, not PCI order") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  // The list names GPU 6 before GPU 3: position 0 is GPU 6.
  const std::string cvd = test::node_uuid(6) + ",3";
  auto r = run_ranks(d, cvd, 2, {"--devices", "1,0"});
  // Rank 0 gets the first free allowed GPU in PCI order (3, position 1).
  check_ran(r, {3, 6},
            {"env device=1 order=PCI_BUS_ID", "env device=0 order=PCI_BUS_ID",
             test::rank_line(0, 1), test::rank_line(1, 0)});
  REQUIRE(test::eventually([&] { return Client({d.endpoint()}).status().jobs.empty(); }, 10s));
  // A position past the list's end is refused, naming the list's length.
  test::Process bad(
      test::muster_cmd("run", {"--nproc-per-node", "1", "--devices", "2", "--", "true"}),
      {{"MUSTER_ENDPOINT", d.endpoint()}, {"CUDA_VISIBLE_DEVICES", cvd}}, true);
  auto out = bad.read_all(20s);
  CHECK(bad.wait(10s) == 1);
  CHECK_THAT(out, Catch::Contains("--devices 2: CUDA_VISIBLE_DEVICES leaves only 2 GPU(s) "
                                  "visible, positions 0..1"));
  // A list that names none of the node's GPUs leases none of them.
  test::Process none(test::muster_cmd("run", {"--nproc-per-node", "1", "--", "true"}),
                     {{"MUSTER_ENDPOINT", d.endpoint()}, {"CUDA_VISIBLE_DEVICES", "8,0"}}, true);
  auto none_out = none.read_all(20s);
  CHECK(none.wait(10s) == 1);
  CHECK_THAT(none_out,
             Catch::Contains("CUDA_VISIBLE_DEVICES='8,0' leaves none of this node's GPUs visible"));
}

TEST_CASE("without CUDA_VISIBLE_DEVICES ordinals are NVML indices, whatever CUDA's own order") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  auto r = run_ranks(d, "-", 2, {"--devices", "5,7"});
  check_ran(r, {5, 7},
            {"env device=5 order=PCI_BUS_ID", "env device=7 order=PCI_BUS_ID",
             test::rank_line(0, 5), test::rank_line(1, 7)});
}

TEST_CASE("a rank leased a GPU its CUDA_VISIBLE_DEVICES hides is told so at join") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  // Outside muster run the daemon leases the first free GPU, 0, which
  // CUDA cannot see in this process.
  const std::string refused = test::join_alone_under(d, "5");
  CHECK_THAT(refused, Catch::StartsWith("no_device: GPU 0, leased to this rank, is not among "
                                        "CUDA_VISIBLE_DEVICES='5'"));
}
