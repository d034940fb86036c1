// select_device checks that the device CUDA opens is the leased GPU, by
// UUID: on the NVML double's 8-GPU node, with a fake CUDA runtime
// (tests/fake_cudart/, preloaded) that numbers the same GPUs in PCI bus
// order (what muster run's CUDA_DEVICE_ORDER=PCI_BUS_ID gives) or
// fastest-first (what CUDA does without it).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "muster/client.hpp"
#include "muster/error.hpp"
#include "muster/gpu.hpp"
#include "support/nvml_node.hpp"
#include "support/process.hpp"

namespace test = muster::test;
using muster::ErrorCode;

namespace {

// The node's GPUs in the order given, as the fake CUDA runtime lists them.
void fake_cuda_order(std::initializer_list<int> order) {
  std::string s;
  for (int i : order) s += (s.empty() ? "" : ",") + test::node_uuid(i);
  ::setenv("MUSTER_FAKE_CUDA_UUIDS", s.c_str(), 1);
}

}  // namespace

TEST_CASE("select_device opens the leased GPU, and refuses another one with a sentence") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  muster::Client c({d.endpoint()});
  auto me = c.join({"uuid-check", 1, true, 0});
  REQUIRE(me.device == 0);
  REQUIRE(me.device_uuid == test::node_uuid(0));

  SECTION("CUDA in PCI bus order: device 0 is the leased GPU") {
    fake_cuda_order({0, 1, 2, 3, 4, 5, 6, 7});
    CHECK(muster::gpu::select_device(me) == 0);
  }
  SECTION("CUDA fastest-first: device 0 is another GPU") {
    fake_cuda_order({4, 0, 5, 1, 6, 2, 7, 3});
    try {
      muster::gpu::select_device(me);
      FAIL("select_device opened GPU 4 for a rank that leased GPU 0");
    } catch (const muster::Error& e) {
      CHECK(e.code() == ErrorCode::kNoDevice);
      std::string what = e.what();
      CHECK(what.find(test::node_uuid(4)) != std::string::npos);
      CHECK(what.find(test::node_uuid(0)) != std::string::npos);
      CHECK(what.find("CUDA_DEVICE_ORDER=PCI_BUS_ID") != std::string::npos);
    }
  }
  SECTION("UUIDs compare without regard to case") {
    std::string upper = test::node_uuid(0);
    for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    ::setenv("MUSTER_FAKE_CUDA_UUIDS", upper.c_str(), 1);
    CHECK(muster::gpu::select_device(me) == 0);
  }
}

TEST_CASE("without a UUID from the daemon, select_device only sets the device") {
  // A daemon whose GPUs have no UUID (simulated): nothing to check against.
  test::TestDaemon d({"--simulate-gpus", "2"});
  muster::Client c({d.endpoint()});
  auto me = c.join({"no-uuid", 1, true, 0});
  REQUIRE(me.device == 0);
  CHECK(me.device_uuid.empty());
  fake_cuda_order({4, 0});
  CHECK(muster::gpu::select_device(me) == 0);
}
