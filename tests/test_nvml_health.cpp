// GPUs that fail while the daemon runs: NVML's XID events, through the NVML
// double (an XID line appended to the scenario while musterd runs).
#include <catch2/catch.hpp>

#include <future>

#include "muster/client.hpp"
#include "muster/error.hpp"
#include "support/error_code.hpp"
#include "support/muster_cli.hpp"
#include "support/nvml_node.hpp"
#include "support/nvml_stuck.hpp"
#include "support/process.hpp"

using muster::Client;
using namespace std::chrono_literals;
namespace test = muster::test;

TEST_CASE("an XID 79 on a leased GPU mid-job quarantines it and fails its job's waits") {
  // Rank 0 waits in a barrier rank 1 never reaches. (Had the XID come before
  // it parked, the barrier would fail the same way, at arrival.)
  test::StuckJob job;
  // A harmless XID (13: a graphics engine exception) changes nothing; the
  // critical one after it does.
  job.node.append("xid gpu=" + test::node_uuid(0) + " code=13");
  job.node.append("xid gpu=" + test::node_uuid(1) + " code=79");
  REQUIRE(job.waiting.wait_for(30s) == std::future_status::ready);
  auto failed = job.waiting.get();
  CHECK_THAT(failed, Catch::StartsWith("device_failed: GPU 1 (" + test::node_uuid(1) + ")"));
  CHECK_THAT(failed, Catch::Contains("critical XID 79"));
  CHECK_THAT(failed, Catch::Contains("local rank 1 of job 'train'"));
  // Later waits of the job fail at once, naming the GPU.
  CHECK_THAT(test::outcome([&] { job.r1.get("never", 60s); }),
             Catch::StartsWith("device_failed: GPU 1 (" + test::node_uuid(1) + ")"));
  auto s = Client({job.d.endpoint()}).status();
  REQUIRE(s.devices.size() == 8);
  CHECK(s.devices[1].health == "quarantined");
  CHECK(s.devices[1].reason == "critical XID 79");
  CHECK(s.devices[0].health == "ok");
  CHECK(s.devices[2].health == "ok");
  // Another job's waits are not touched.
  Client other({job.d.endpoint()});
  CHECK(other.join({"other", 1, true, 0}).device == 2);
  other.set("k", "v");
  CHECK(other.get("k", 5s) == "v");
}

TEST_CASE("muster run stops its group when a GPU of its job fails mid-job, naming the GPU") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  // Ranks busy on their GPUs, in no muster wait: only muster run can end them.
  test::Process run(test::muster_cmd("run", {"--nproc-per-node", "2", "--", "sleep", "60"}),
                    {{"MUSTER_ENDPOINT", d.endpoint()}}, true);
  REQUIRE(test::eventually(
      [&] {
        auto s = Client({d.endpoint()}).status();
        return s.jobs.size() == 1 && s.jobs[0].ranks.size() == 2 &&
               s.jobs[0].ranks[1].state == "running" && s.jobs[0].ranks[1].device == 1;
      },
      20s));
  node.append("xid gpu=" + test::node_uuid(1) + " code=79");
  auto out = run.read_all(30s);
  auto rc = run.wait(10s);
  INFO(out);
  REQUIRE(rc.has_value());
  CHECK(*rc != 0);
  // Said once when it stops the group, and again in the failure summary.
  CHECK_THAT(out, Catch::Contains("muster run: GPU 1 (" + test::node_uuid(1) +
                                  "), leased to local rank 1 of job '"));
  CHECK_THAT(out, Catch::Contains("failed: critical XID 79; the job cannot continue on it; "
                                  "stopping 2 worker(s)"));
  // The GPU stays out of service; the ranks are gone.
  CHECK(test::eventually([&] { return Client({d.endpoint()}).status().jobs.empty(); }, 10s));
  CHECK(Client({d.endpoint()}).status().devices[1].health == "quarantined");
}
