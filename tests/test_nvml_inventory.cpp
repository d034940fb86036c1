// The inventory as NVML reports it, through the NVML double: an 8-GPU
// two-socket node, and GPUs whose health keeps them from being leased.
#include <catch2/catch.hpp>

#include <memory>
#include <set>

#include "muster/client.hpp"
#include "muster/error.hpp"
#include "support/error_code.hpp"
#include "support/nvml_node.hpp"
#include "support/process.hpp"

using muster::Client;
using namespace std::chrono_literals;
namespace test = muster::test;

namespace {

std::string muster_status(const test::TestDaemon& d, const std::string& flag) {
  std::vector<std::string> argv{test::program("MUSTER_TEST_MUSTER"), "status"};
  if (!flag.empty()) argv.push_back(flag);
  test::Process p(argv, {{"MUSTER_ENDPOINT", d.endpoint()}});
  auto out = p.read_all(20s);
  REQUIRE(p.wait(10s) == 0);
  return out;
}

}  // namespace

TEST_CASE("an 8-GPU two-socket node: GPUs in PCI bus order with UUID, bus id and NUMA node") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  Client c({d.endpoint()});
  auto s = c.status();
  REQUIRE(s.devices.size() == 8);
  for (int i = 0; i < 8; ++i) {
    const auto& g = s.devices[i];
    CHECK(g.index == static_cast<uint32_t>(i));
    CHECK(g.uuid == test::node_uuid(i));
    CHECK(g.pci_bus_id == test::node_bus(i));
    CHECK(g.name == "NVIDIA H100 80GB HBM3");
    CHECK(g.numa_node == (i < 4 ? 0 : 1));
    CHECK(g.health == "ok");
    CHECK(g.reason.empty());
  }
  auto json = muster_status(d, "--json");
  CHECK_THAT(json, Catch::Contains("\"uuid\":\"" + test::node_uuid(5) + "\""));
  CHECK_THAT(json, Catch::Contains("\"numa_node\":1"));
  CHECK_THAT(json, Catch::Contains("\"health\":\"ok\""));
  auto table = muster_status(d, "");
  CHECK_THAT(table, Catch::Contains(test::node_uuid(7)));
  CHECK_THAT(table, Catch::Contains("HEALTH"));
  // Eight ranks get the eight GPUs, each once.
  std::vector<std::unique_ptr<Client>> ranks;
  std::set<int> got;
  for (int r = 0; r < 8; ++r) {
    ranks.push_back(std::make_unique<Client>(muster::ClientOptions{d.endpoint()}));
    got.insert(ranks.back()->join({"eight", 8, true, r}).device);
  }
  CHECK(got == std::set<int>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("an unhealthy GPU is quarantined: shown with its reason, never leased") {
  struct Case {
    const char* extra;
    const char* reason;
  };
  auto [extra, reason] = GENERATE(Case{"ecc=2", "2 volatile uncorrectable ECC error(s)"},
                                  Case{"retired_pending=1", "retired pages pending"},
                                  Case{"remap_failed=1", "row remapping failed"},
                                  Case{"lost=1", "lost: the GPU fell off the bus"},
                                  Case{"mig=1", "MIG mode is enabled"});
  CAPTURE(extra);
  test::NvmlNode node(test::eight_gpu_node({{3, extra}}));
  test::TestDaemon d({}, node.env());
  Client c({d.endpoint()});
  auto s = c.status();
  REQUIRE(s.devices.size() == 8);
  CHECK(s.devices[3].health == "quarantined");
  CHECK_THAT(s.devices[3].reason, Catch::Contains(reason));
  for (int i : {0, 1, 2, 4, 5, 6, 7}) CHECK(s.devices[i].health == "ok");
  CHECK_THAT(muster_status(d, ""), Catch::Contains(reason));
  // Seven ranks get the seven healthy GPUs; an eighth finds none.
  // Which GPU each got, by UUID: ordinals are CUDA's, and CUDA does not
  // enumerate a lost GPU, so there the ordinals after it count one less.
  std::vector<std::unique_ptr<Client>> ranks;
  std::set<std::string> got;
  std::set<int> ordinals;
  for (int r = 0; r < 7; ++r) {
    ranks.push_back(std::make_unique<Client>(muster::ClientOptions{d.endpoint()}));
    auto me = ranks.back()->join({"seven", 8, true, r});
    got.insert(me.device_uuid);
    ordinals.insert(me.device);
  }
  std::set<std::string> healthy;
  for (int i : {0, 1, 2, 4, 5, 6, 7}) healthy.insert(test::node_uuid(i));
  CHECK(got == healthy);
  CHECK(ordinals == (std::string(extra) == "lost=1" ? std::set<int>{0, 1, 2, 3, 4, 5, 6}
                                                    : std::set<int>{0, 1, 2, 4, 5, 6, 7}));
  Client eighth({d.endpoint()});
  // The quarantined GPU is not leased.
  CHECK_THAT(test::outcome([&] {
               eighth.join({"seven", 8, true, 7});
             }),
             Catch::StartsWith("no_device: ") && Catch::Contains("GPU 3 is quarantined"));
}

TEST_CASE("workers of muster run number GPUs in PCI bus order, as NVML does") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  test::Process p({test::program("MUSTER_TEST_MUSTER"), "run", "-n", "2", "--use-env", "/bin/sh",
                   "-c", "echo rank=$LOCAL_RANK device=$MUSTER_DEVICE order=$CUDA_DEVICE_ORDER"},
                  {{"MUSTER_ENDPOINT", d.endpoint()}, {"CUDA_DEVICE_ORDER", "FASTEST_FIRST"}});
  auto out = p.read_all(60s);
  CHECK(p.wait(30s) == 0);
  CHECK_THAT(out, Catch::Contains("rank=0 device=0 order=PCI_BUS_ID"));
  CHECK_THAT(out, Catch::Contains("rank=1 device=1 order=PCI_BUS_ID"));
}
