// Health from the driver's recommended recovery action
// (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION through nvmlDeviceGetFieldValues),
// beside the ECC, row-remap and retired-page checks, and the XID classes of
// NVIDIA's XID catalogue: which XIDs fail a job, which quarantine its GPU,
// which are only logged.
#include <catch2/catch.hpp>

#include <future>

#include "muster/client.hpp"
#include "muster/error.hpp"
#include "support/error_code.hpp"
#include "support/muster_cli.hpp"
#include "support/nvml_node.hpp"
#include "support/process.hpp"

using muster::Client;
using namespace std::chrono_literals;
namespace test = muster::test;

TEST_CASE("a GPU whose driver asks for a reset or a reboot is quarantined at discovery") {
  test::NvmlNode node(test::eight_gpu_node({{2, "recovery=1"}, {5, "recovery=2"}}));
  test::TestDaemon d({}, node.env());
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() == 8);
  CHECK(s.devices[2].health == "quarantined");
  CHECK_THAT(s.devices[2].reason, Catch::Contains("GPU reset (recovery action GPU_RESET)"));
  CHECK(s.devices[5].health == "quarantined");
  CHECK_THAT(s.devices[5].reason, Catch::Contains("node reboot"));
  CHECK(s.devices[0].health == "ok");
}

TEST_CASE("a driver without nvmlDeviceGetFieldValues: recovery action not reported, no failure") {
  test::TempDir logs;
  const std::string log = logs.path() + "/musterd.log";
  test::NvmlNode node(test::eight_gpu_node({{2, "recovery=1"}, {3, "ecc=1"}}));
  auto env = node.env();
  env["MUSTER_NVML_LIBRARY"] = test::program("MUSTER_TEST_NVML_DOUBLE_OLD");
  env["MUSTER_LOG_SINK"] = "file:" + log;
  test::TestDaemon d({"--log-level", "notice"}, env);
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() == 8);
  CHECK(s.devices[2].health == "ok");
  // The other checks still apply.
  CHECK(s.devices[3].health == "quarantined");
  CHECK_THAT(test::slurp(log), Catch::Contains("recommended recovery action is not reported"));
}

TEST_CASE("XIDs 63 and 92 are informational: a job on the GPU goes on") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  Client r0({d.endpoint()});
  CHECK(r0.join({"train", 1, true, 0}).device == 0);
  node.append("xid gpu=" + test::node_uuid(0) + " code=63");
  node.append("xid gpu=" + test::node_uuid(0) + " code=92");
  // A critical one on another GPU, after them: once it is seen, so were they.
  node.append("xid gpu=" + test::node_uuid(7) + " code=79");
  REQUIRE(test::eventually(
      [&] { return Client({d.endpoint()}).status().devices[7].health == "quarantined"; }, 20s));
  CHECK(Client({d.endpoint()}).status().devices[0].health == "ok");
  r0.set("k", "v");
  CHECK(r0.get("k", 5s) == "v");
}

TEST_CASE("a contained XID 94 fails the job on the GPU but leaves the GPU in service") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  Client r0({d.endpoint()});
  CHECK(r0.join({"train", 1, true, 0}).device == 0);
  auto waiting =
      std::async(std::launch::async, [&] { return test::outcome([&] { r0.get("never", 60s); }); });
  node.append("xid gpu=" + test::node_uuid(0) + " code=94");
  REQUIRE(waiting.wait_for(30s) == std::future_status::ready);
  CHECK_THAT(waiting.get(), Catch::StartsWith("device_failed: GPU 0 (" + test::node_uuid(0) +
                                              "), leased to local rank 0 of job 'train', "
                                              "failed: XID 94"));
  CHECK(Client({d.endpoint()}).status().devices[0].health == "ok");
}

TEST_CASE("XIDs 119, 120 (GSP) and 154 (recovery action changed) quarantine the GPU") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  // The driver now asks for a reboot, and says so with XID 154.
  node.set(test::eight_gpu_node({{3, "recovery=2"}}) + "xid gpu=" + test::node_uuid(1) +
           " code=119\nxid gpu=" + test::node_uuid(2) + " code=120\nxid gpu=" + test::node_uuid(3) +
           " code=154\n");
  REQUIRE(test::eventually(
      [&] { return Client({d.endpoint()}).status().devices[3].health == "quarantined"; }, 20s));
  auto s = Client({d.endpoint()}).status();
  CHECK(s.devices[1].health == "quarantined");
  CHECK(s.devices[1].reason == "critical XID 119");
  CHECK(s.devices[2].reason == "critical XID 120");
  CHECK_THAT(s.devices[3].reason, Catch::StartsWith("critical XID 154; "));
  CHECK_THAT(s.devices[3].reason, Catch::Contains("node reboot"));
}
