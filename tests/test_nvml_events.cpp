// The NVML event thread on what real nodes do, through the NVML double: a
// GPU lost mid-run (nvmlEventSetWait_v2 then answers GPU_IS_LOST at once,
// every time), GPUs without XID events, a wait that fails otherwise. The
// daemon must quarantine the lost GPU, say which GPUs it cannot watch, and
// never spin: its CPU time over two seconds is the measure (a spin burns a
// whole core, an idle daemon next to nothing).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>
#include <future>
#include <iterator>
#include <sstream>
#include <thread>

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

namespace {

// utime + stime of `pid`, in clock ticks (/proc/PID/stat fields 14, 15).
long cpu_ticks(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return utime + stime;
}

// The share of one core `pid` used over two seconds.
double cpu_share(pid_t pid) {
  long before = cpu_ticks(pid);
  auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(2s);
  long after = cpu_ticks(pid);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(after - before) / static_cast<double>(sysconf(_SC_CLK_TCK)) / secs;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE(
    "a GPU lost mid-run is quarantined, its job is told, it is never leased again, and the "
    "daemon stays idle") {
  test::StuckJob job;
  job.node.set(test::eight_gpu_node({{1, "lost=1"}}));
  REQUIRE(job.waiting.wait_for(30s) == std::future_status::ready);
  auto failed = job.waiting.get();
  CHECK_THAT(failed, Catch::StartsWith("device_failed: GPU 1 (" + test::node_uuid(1) + ")"));
  CHECK_THAT(failed, Catch::Contains("local rank 1 of job 'train', failed: lost"));
  auto s = Client({job.d.endpoint()}).status();
  REQUIRE(s.devices.size() == 8);
  CHECK(s.devices[1].health == "quarantined");
  CHECK_THAT(s.devices[1].reason, Catch::Contains("NVML_ERROR_GPU_IS_LOST"));
  CHECK(s.devices[0].health == "ok");
  // The lost GPU stays in the scenario: a watcher that kept it in its set
  // (or ignored the error) would wait again at once, forever.
  double share = cpu_share(job.d.pid());
  INFO("musterd used " << share * 100 << "% of a core with a GPU lost");
  CHECK(share < 0.2);
  // The other GPUs are still watched: a critical XID on GPU 0 still fails
  // the job's waits... (GPU 0 is the job's other GPU.)
  job.node.append("xid gpu=" + test::node_uuid(0) + " code=79");
  REQUIRE(test::eventually(
      [&] { return Client({job.d.endpoint()}).status().devices[0].health == "quarantined"; }, 20s));
  job.r0.leave();
  job.r1.leave();
  // Six GPUs are left to lease: 2..7; never 0 or 1.
  // By UUID: ordinals are CUDA's, which does not enumerate the lost GPU 1.
  std::vector<std::unique_ptr<Client>> ranks;
  std::vector<std::string> got, want;
  for (int i = 0; i < 6; ++i) {
    ranks.push_back(std::make_unique<Client>(muster::ClientOptions{job.d.endpoint()}));
    got.push_back(ranks.back()->join({"after", 7, true, i}).device_uuid);
    want.push_back(test::node_uuid(i + 2));
  }
  CHECK(got == want);
  Client seventh({job.d.endpoint()});
  CHECK_THAT(test::outcome([&] {
               seventh.join({"after", 7, true, 6});
             }),
             Catch::StartsWith("no_device"));
}

TEST_CASE("GPUs that cannot be watched for XIDs are logged once each, with why") {
  test::TempDir logs;
  const std::string log = logs.path() + "/musterd.log";
  // GPU 3 supports no event types (a GeForce board, a vGPU profile); GPU 5
  // supports some, but not XIDs.
  test::NvmlNode node(test::eight_gpu_node({{3, "events=0"}, {5, "events=0x7"}}));
  auto env = node.env();
  env["MUSTER_LOG_SINK"] = "file:" + log;
  test::TestDaemon d({}, env);
  REQUIRE(test::eventually(
      [&] { return count(test::slurp_or_missing(log), "is not watched for XID events") == 2; },
      20s));
  auto text = test::slurp(log);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("GPU 3 is not watched for XID events: the GPU does not support "
                                   "XID events (nvmlDeviceGetSupportedEventTypes)"));
  CHECK_THAT(text, Catch::Contains("GPU 5 is not watched for XID events"));
  // A lost GPU makes a new set: the unwatched ones are not said again.
  node.set(test::eight_gpu_node({{3, "events=0"}, {5, "events=0x7"}, {6, "lost=1"}}));
  REQUIRE(test::eventually(
      [&] { return Client({d.endpoint()}).status().devices[6].health == "quarantined"; }, 20s));
  text = test::slurp(log);
  CHECK(count(text, "GPU 3 is not watched") == 1);
  CHECK(count(text, "GPU 5 is not watched") == 1);
  CHECK(Client({d.endpoint()}).status().devices[3].health == "ok");
}

TEST_CASE("a driver without nvmlDeviceGetSupportedEventTypes: a refused registration is logged") {
  test::TempDir logs;
  const std::string log = logs.path() + "/musterd.log";
  test::NvmlNode node(test::eight_gpu_node({{2, "events=0"}}));
  auto env = node.env();
  env["MUSTER_NVML_LIBRARY"] = test::program("MUSTER_TEST_NVML_DOUBLE_OLD");
  env["MUSTER_LOG_SINK"] = "file:" + log;
  test::TestDaemon d({}, env);
  REQUIRE(test::eventually(
      [&] {
        return test::slurp_or_missing(log).find(
                   "GPU 2 is not watched for XID events: nvmlDeviceRegisterEvents failed "
                   "(NVML_ERROR_NOT_SUPPORTED)") != std::string::npos;
      },
      20s));
  CHECK(count(test::slurp(log), "is not watched") == 1);
  CHECK(Client({d.endpoint()}).status().devices.size() == 8);
}

TEST_CASE("an event wait that keeps failing is retried each second, not in a spin") {
  test::TempDir logs;
  const std::string log = logs.path() + "/musterd.log";
  test::NvmlNode node(test::eight_gpu_node() + "unsupported fn=nvmlEventSetWait_v2\n");
  auto env = node.env();
  env["MUSTER_LOG_SINK"] = "file:" + log;
  test::TestDaemon d({}, env);
  double share = cpu_share(d.pid());
  INFO("musterd used " << share * 100 << "% of a core");
  CHECK(share < 0.2);
  auto text = test::slurp_or_missing(log);
  INFO(text);
  CHECK(count(text, "nvmlEventSetWait_v2 failed (error 999); trying again every second") == 1);
  // It serves meanwhile.
  Client c({d.endpoint()});
  CHECK(c.join({"j", 1, true, 0}).device == 0);
}
