// The interconnect matrix as NVML reports it, through the NVML double: NVLink
// pairs on a two-socket node, an NVSwitch node, GPUs listed out of bus
// order, an NVML that cannot say; the status reply, `muster status
// --topology` and `--json`. And the double's own topology entry points
// against nvml.h's semantics.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <stdlib.h>

#include <memory>
#include <sstream>

#include "gpu/nvml_api.hpp"
#include "muster/client.hpp"
#include "support/nvml_node.hpp"
#include "support/process.hpp"

using muster::Client;
using namespace std::chrono_literals;
namespace test = muster::test;

namespace {

std::string muster_status(const test::TestDaemon& d, const std::string& flag) {
  test::Process p({test::program("MUSTER_TEST_MUSTER"), "status", flag},
                  {{"MUSTER_ENDPOINT", d.endpoint()}});
  auto out = p.read_all(20s);
  REQUIRE(p.wait(10s) == 0);
  return out;
}

// The words of the --topology row of `gpu` ("GPU3"): the line that starts
// with it (the header starts with blanks).
std::vector<std::string> row(const std::string& table, const std::string& gpu) {
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(gpu + " ", 0) != 0) continue;
    std::istringstream words(line);
    std::vector<std::string> out;
    for (std::string w; words >> w;) out.push_back(w);
    return out;
  }
  return {};
}

// The two-socket node of support/nvml_node.hpp (its lines out of bus
// order) with a PCIe switch under each pair (0,1) (2,3) (4,5) (6,7) and 4
// NVLinks within each pair. The link of (0,1) names GPU 1 by a bus id in
// NVML's legacy spelling, lower case (the daemon must still match it); the
// pair (6,7) also has 2 links that are down.
std::string nvlink_pairs_node() {
  std::map<int, std::string> extra;
  for (int i = 0; i < 8; ++i) extra[i] = "switch=plx" + std::to_string(i / 2);
  std::string s = test::eight_gpu_node(extra);
  s += "nvlink a=" + test::node_uuid(0) + " b=0000:2a:00.0 count=4\n";
  for (int i : {2, 4, 6})
    s += "nvlink a=" + test::node_uuid(i) + " b=" + test::node_uuid(i + 1) + " count=4\n";
  s += "nvlink a=" + test::node_uuid(6) + " b=" + test::node_uuid(7) + " count=2 active=0\n";
  return s;
}

int64_t expected_links(int a, int b) {
  return a != b && a / 2 == b / 2 ? 4 : 0;
}
int64_t expected_path(int a, int b) {
  return a == b ? 0 : a / 2 == b / 2 ? 10 : a / 4 == b / 4 ? 40 : 50;
}

// The scenario of an NVSwitch node (DGX H100): 8 GPUs, each with 18 links
// spread over 4 switches (5+4+4+5); GPU `weak`, if any, has one link fewer.
std::string nvswitch_node(int weak = -1) {
  std::string s = test::eight_gpu_node();
  const char* switches[] = {"00000000:05:00.0", "00000000:06:00.0", "00000000:07:00.0",
                            "00000000:08:00.0"};
  for (int i = 0; i < 8; ++i)
    for (int k = 0; k < 4; ++k) {
      int links = (k == 0 || k == 3 ? 5 : 4) - (i == weak && k == 0 ? 1 : 0);
      s += "nvswitch gpu=" + test::node_uuid(i) + " links=" + std::to_string(links) +
           " bus=" + switches[k] + "\n";
    }
  return s;
}

}  // namespace

TEST_CASE("an 8-GPU two-socket node: NVLink pairs, PCIe switches and sockets, per pair") {
  test::NvmlNode node(nvlink_pairs_node());
  test::TestDaemon d({}, node.env());
  Client c({d.endpoint()});
  auto s = c.status();
  REQUIRE(s.devices.size() == 8);
  CHECK(s.gpu_source == "nvml");
  for (int a = 0; a < 8; ++a) {
    const auto& g = s.devices[a];
    CAPTURE(a);
    CHECK(g.cpu_affinity == (a < 4 ? "0-23,48-71" : "24-47,72-95"));
    REQUIRE(g.nvlinks.size() == 8);
    REQUIRE(g.paths.size() == 8);
    for (int b = 0; b < 8; ++b) {
      CAPTURE(b);
      CHECK(g.nvlinks[b] == expected_links(a, b));
      CHECK(g.paths[b] == expected_path(a, b));
    }
  }

  auto table = muster_status(d, "--topology");
  CHECK_THAT(table, Catch::Contains("CPU Affinity") && Catch::Contains("NUMA Affinity"));
  CHECK(row(table, "GPU0") == std::vector<std::string>{"GPU0", "X", "NV4", "NODE", "NODE", "SYS",
                                                       "SYS", "SYS", "SYS", "0-23,48-71", "0"});
  CHECK(row(table, "GPU5") == std::vector<std::string>{"GPU5", "SYS", "SYS", "SYS", "SYS", "NV4",
                                                       "X", "NODE", "NODE", "24-47,72-95", "1"});
  CHECK(row(table, "GPU7") == std::vector<std::string>{"GPU7", "SYS", "SYS", "SYS", "SYS", "NODE",
                                                       "NODE", "NV4", "X", "24-47,72-95", "1"});
  CHECK_THAT(table, Catch::Contains("NV#  = Connection traversing a bonded set of # NVLinks"));
  CHECK_THAT(table, Catch::Contains("PIX  = Connection traversing at most a single PCIe bridge"));

  auto json = muster_status(d, "--json");
  CHECK_THAT(json, Catch::Contains("\"gpu_source\":\"nvml\""));
  CHECK_THAT(json, Catch::Contains("\"cpu_affinity\":\"0-23,48-71\",\"nvlinks\":[0,4,0,0,0,0,0,0],"
                                   "\"paths\":[0,10,40,40,50,50,50,50]"));
  CHECK_THAT(json, Catch::Contains("\"cpu_affinity\":\"24-47,72-95\",\"nvlinks\":[0,0,0,0,4,0,0,0],"
                                   "\"paths\":[50,50,50,50,10,0,40,40]"));
}

TEST_CASE("a PCIe-only node: switches, host bridges and NUMA nodes show as PIX, PHB, NODE, SYS") {
  // No NVLink at all (the double answers NOT_SUPPORTED): the paths decide.
  test::NvmlNode node(test::eight_gpu_node(
      {{0, "switch=a bridge=hb0"}, {1, "switch=a bridge=hb0"}, {2, "bridge=hb0"}}));
  test::TestDaemon d({}, node.env());
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() == 8);
  CHECK(s.devices[0].nvlinks == std::vector<int64_t>(8, 0));
  CHECK(s.devices[0].paths == std::vector<int64_t>{0, 10, 30, 40, 50, 50, 50, 50});
  CHECK(row(muster_status(d, "--topology"), "GPU2") ==
        std::vector<std::string>{"GPU2", "PHB", "PHB", "X", "NODE", "SYS", "SYS", "SYS", "SYS",
                                 "0-23,48-71", "0"});
}

TEST_CASE("a level nvml.h does not name reads as across sockets, and status still decodes") {
  // GPU 3 reports 77 (a newer driver's level, or garbage) with every other
  // GPU: the status reply's readers take 0..100, placement must not think
  // it near.
  test::NvmlNode node(test::eight_gpu_node({{0, "switch=a"}, {1, "switch=a"}, {3, "level=77"}}));
  test::TestDaemon d({}, node.env());
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() == 8);
  CHECK(s.devices[3].paths == std::vector<int64_t>{50, 50, 50, 0, 50, 50, 50, 50});
  CHECK(s.devices[0].paths[1] == 10);
  CHECK(row(muster_status(d, "--topology"), "GPU3")[1] == "SYS");
}

TEST_CASE("an NVSwitch node: every pair is joined by the switch fabric, NV18") {
  // With the remote device type, and without it (an older driver): a far
  // end that is no GPU of the node is then taken for a switch.
  bool typed = GENERATE(true, false);
  CAPTURE(typed);
  std::string extra = typed ? "" : "unsupported fn=nvmlDeviceGetNvLinkRemoteDeviceType\n";
  test::NvmlNode node(nvswitch_node() + extra);
  test::TestDaemon d({}, node.env());
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() == 8);
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b) {
      CAPTURE(a, b);
      CHECK(s.devices[a].nvlinks.at(b) == (a == b ? 0 : 18));
    }
  auto table = muster_status(d, "--topology");
  for (int a = 0; a < 8; ++a) {
    auto r = row(table, "GPU" + std::to_string(a));
    REQUIRE(r.size() == 11);
    for (int b = 0; b < 8; ++b) CHECK(r[1 + b] == (a == b ? "X" : "NV18"));
  }
}

TEST_CASE("an NVSwitch node with a GPU short of a link: its pairs get the links it has") {
  test::NvmlNode node(nvswitch_node(3));
  test::TestDaemon d({}, node.env());
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() == 8);
  CHECK(s.devices[3].nvlinks == std::vector<int64_t>{17, 17, 17, 0, 17, 17, 17, 17});
  CHECK(s.devices[0].nvlinks == std::vector<int64_t>{0, 18, 18, 17, 18, 18, 18, 18});
}

TEST_CASE("GPUs listed out of bus order: the matrix is by NVML's index, which is bus order") {
  // Bus order: A (0x10) B (0x20) C (0x30) D (0x40), written D C B A; the
  // links and switches name the GPUs by bus id and UUID.
  test::NvmlNode node(
      "gpu uuid=GPU-d bus=00000000:40:00.0 numa=1 cpus=2-3\n"
      "gpu uuid=GPU-c bus=00000000:30:00.0 numa=1 cpus=2-3 switch=x\n"
      "gpu uuid=GPU-b bus=00000000:20:00.0 numa=0 cpus=0-1 switch=x\n"
      "gpu uuid=GPU-a bus=00000000:10:00.0 numa=0 cpus=0-1\n"
      "nvlink a=00000000:40:00.0 b=GPU-a count=2\n"
      "nvlink a=GPU-b b=GPU-d count=1\n");
  test::TestDaemon d({}, node.env());
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() == 4);
  CHECK(s.devices[0].uuid == "GPU-a");
  CHECK(s.devices[0].nvlinks == std::vector<int64_t>{0, 0, 0, 2});
  CHECK(s.devices[1].nvlinks == std::vector<int64_t>{0, 0, 0, 1});
  CHECK(s.devices[3].nvlinks == std::vector<int64_t>{2, 1, 0, 0});
  CHECK(s.devices[1].paths == std::vector<int64_t>{40, 0, 10, 50});
  CHECK(s.devices[2].paths == std::vector<int64_t>{50, 10, 0, 40});
  auto table = muster_status(d, "--topology");
  CHECK(row(table, "GPU0") ==
        std::vector<std::string>{"GPU0", "X", "NODE", "SYS", "NV2", "0-1", "0"});
  CHECK(row(table, "GPU2") ==
        std::vector<std::string>{"GPU2", "SYS", "PIX", "X", "NODE", "2-3", "1"});
}

TEST_CASE("an NVML that cannot place its GPUs: topology unknown, the daemon serves as before") {
  const char* fns = GENERATE(
      "nvmlDeviceGetTopologyCommonAncestor,nvmlDeviceGetNvLinkState,"
      "nvmlDeviceGetNvLinkRemotePciInfo_v2,nvmlDeviceGetNvLinkRemoteDeviceType",
      "nvmlDeviceGetTopologyCommonAncestor");
  CAPTURE(fns);
  test::NvmlNode node(nvlink_pairs_node() + "unsupported fn=" + fns + "\n");
  test::TestDaemon d({}, node.env());
  Client c({d.endpoint()});
  auto s = c.status();
  REQUIRE(s.devices.size() == 8);
  for (const auto& g : s.devices) {
    CHECK(g.nvlinks.empty());
    CHECK(g.paths.empty());
    CHECK(g.health == "ok");
  }
  CHECK(s.devices[0].cpu_affinity == "0-23,48-71");  // not topology: NVML still says it
  auto table = muster_status(d, "--topology");
  CHECK(table ==
        "topology unknown: this daemon's GPUs come from NVML, which does not report their "
        "interconnect on this node\n");
  auto json = muster_status(d, "--json");
  CHECK_THAT(json, Catch::Contains("\"nvlinks\":null,\"paths\":null"));
  Client rank({d.endpoint()});
  CHECK(rank.join({"after", 1, true, 0}).device == 0);
}

TEST_CASE("simulated GPUs have no topology: --topology says so, exit 0") {
  test::TestDaemon d({"--simulate-gpus", "2"});
  CHECK(muster_status(d, "--topology") ==
        "topology unknown: this daemon's GPUs come from --simulate-gpus (simulated GPUs have no "
        "interconnect)\n");
  CHECK_THAT(muster_status(d, "--json"), Catch::Contains("\"gpu_source\":\"simulated\""));
}

TEST_CASE("the double's topology entry points answer as nvml.h says") {
  test::NvmlNode node(
      "gpu uuid=GPU-a bus=00000000:10:00.0 numa=0 switch=s bridge=b\n"
      "gpu uuid=GPU-b bus=00000000:20:00.0 numa=0 switch=s bridge=b\n"
      "gpu uuid=GPU-c bus=00000000:30:00.0 numa=0 bridge=b\n"
      "gpu uuid=GPU-d bus=00000000:40:00.0 numa=1\n"
      "nvlink a=GPU-a b=GPU-b count=1\n"
      "nvlink a=GPU-a b=GPU-b count=1 active=0\n"
      "nvswitch gpu=GPU-c links=2 bus=00000000:05:00.0\n");
  ::setenv("MUSTER_NVML_SCENARIO", node.env().at("MUSTER_NVML_SCENARIO").c_str(), 1);
  void* lib = ::dlopen(test::program("MUSTER_TEST_NVML_DOUBLE").c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib);
  auto fn = [&](const char* name) {
    void* f = ::dlsym(lib, name);
    REQUIRE(f);
    return f;
  };
  auto init = reinterpret_cast<muster::gpu::nvml_fn::Init>(fn("nvmlInit_v2"));
  auto shutdown = reinterpret_cast<muster::gpu::nvml_fn::Shutdown>(fn("nvmlShutdown"));
  auto handle =
      reinterpret_cast<muster::gpu::nvml_fn::GetHandleByIndex>(fn("nvmlDeviceGetHandleByIndex_v2"));
  auto ancestor = reinterpret_cast<muster::gpu::nvml_fn::GetTopologyCommonAncestor>(
      fn("nvmlDeviceGetTopologyCommonAncestor"));
  auto state =
      reinterpret_cast<muster::gpu::nvml_fn::GetNvLinkState>(fn("nvmlDeviceGetNvLinkState"));
  auto remote = reinterpret_cast<muster::gpu::nvml_fn::GetNvLinkRemotePciInfo>(
      fn("nvmlDeviceGetNvLinkRemotePciInfo_v2"));
  auto type = reinterpret_cast<muster::gpu::nvml_fn::GetNvLinkRemoteDeviceType>(
      fn("nvmlDeviceGetNvLinkRemoteDeviceType"));
  nvmlGpuTopologyLevel_t level{};
  nvmlEnableState_t on{};
  CHECK(ancestor(nullptr, nullptr, &level) == NVML_ERROR_UNINITIALIZED);
  REQUIRE(init() == NVML_SUCCESS);
  nvmlDevice_t g[4] = {};
  for (unsigned i = 0; i < 4; ++i) REQUIRE(handle(i, &g[i]) == NVML_SUCCESS);
  auto level_of = [&](int a, int b) {
    CHECK(ancestor(g[a], g[b], &level) == NVML_SUCCESS);
    return static_cast<int>(level);
  };
  CHECK(level_of(0, 0) == NVML_TOPOLOGY_INTERNAL);
  CHECK(level_of(0, 1) == NVML_TOPOLOGY_SINGLE);
  CHECK(level_of(1, 2) == NVML_TOPOLOGY_HOSTBRIDGE);
  CHECK(level_of(2, 1) == NVML_TOPOLOGY_HOSTBRIDGE);
  CHECK(level_of(3, 0) == NVML_TOPOLOGY_SYSTEM);
  CHECK(ancestor(g[0], g[1], nullptr) == NVML_ERROR_INVALID_ARGUMENT);
  // Links: 0 active to GPU-b, 1 down, 2..17 free, 18 past the last.
  CHECK(state(g[0], 0, &on) == NVML_SUCCESS);
  CHECK(on == NVML_FEATURE_ENABLED);
  CHECK(state(g[0], 1, &on) == NVML_SUCCESS);
  CHECK(on == NVML_FEATURE_DISABLED);
  CHECK(state(g[0], 17, &on) == NVML_SUCCESS);
  CHECK(on == NVML_FEATURE_DISABLED);
  CHECK(state(g[0], NVML_NVLINK_MAX_LINKS, &on) == NVML_ERROR_INVALID_ARGUMENT);
  CHECK(state(g[0], 0, nullptr) == NVML_ERROR_INVALID_ARGUMENT);
  CHECK(state(g[3], 0, &on) == NVML_ERROR_NOT_SUPPORTED);  // no NVLink
  nvmlPciInfo_t pci{};
  REQUIRE(remote(g[0], 0, &pci) == NVML_SUCCESS);
  CHECK(std::string(pci.busId) == "00000000:20:00.0");
  CHECK(pci.bus == 0x20);
  REQUIRE(remote(g[0], 1, &pci) == NVML_SUCCESS);  // down, but cabled to GPU-b
  CHECK(std::string(pci.busId) == "00000000:20:00.0");
  CHECK(remote(g[0], 2, &pci) == NVML_ERROR_NOT_SUPPORTED);  // free
  REQUIRE(remote(g[2], 1, &pci) == NVML_SUCCESS);
  CHECK(std::string(pci.busId) == "00000000:05:00.0");
  nvmlIntNvLinkDeviceType_t t{};
  REQUIRE(type(g[2], 0, &t) == NVML_SUCCESS);
  CHECK(t == NVML_NVLINK_DEVICE_TYPE_SWITCH);
  REQUIRE(type(g[1], 0, &t) == NVML_SUCCESS);
  CHECK(t == NVML_NVLINK_DEVICE_TYPE_GPU);
  CHECK(type(g[1], NVML_NVLINK_MAX_LINKS, &t) == NVML_ERROR_INVALID_ARGUMENT);
  CHECK(shutdown() == NVML_SUCCESS);
  ::dlclose(lib);
  ::unsetenv("MUSTER_NVML_SCENARIO");
}
