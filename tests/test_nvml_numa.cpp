// muster run --numa-binding, with real workers on this machine: the NVML
// double puts GPUs near CPUs that exist here (0 and 1: two GPUs on each),
// and each worker reports the CPUs and memory policy the kernel gives it
// (/proc/self/status Cpus_allowed_list, /proc/self/numa_maps).
#include <catch2/catch.hpp>

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <map>
#include <optional>
#include <regex>

#include "muster/client.hpp"
#include "support/muster_cli.hpp"
#include "support/nvml_node.hpp"
#include "support/process.hpp"

using muster::Client;
using namespace std::chrono_literals;
namespace test = muster::test;

namespace {

// Four GPUs: cpus[i] and numa[i] are GPU i's CPU affinity and NUMA node.
std::string four_gpus(const std::vector<std::string>& cpus, const std::vector<int>& numa) {
  std::string s;
  for (int i = 0; i < 4; ++i)
    s += "gpu uuid=" + test::node_uuid(i) + " bus=" + test::node_bus(i) +
         " name=\"NVIDIA H100 80GB HBM3\" numa=" + std::to_string(numa[i]) + " cpus=" + cpus[i] +
         "\n";
  return s;
}
// GPUs 0-1 on NUMA node 0 near CPU 0, GPUs 2-3 on node 1 near CPU 1.
std::string split_node() {
  return four_gpus({"0", "0", "1", "1"}, {0, 0, 1, 1});
}

// The value of a "Key:\tvalue" line of a /proc status file, as the kernel
// wrote it.
std::string status_field(const std::string& status, const std::string& key) {
  std::smatch m;
  std::regex line("(^|\n)" + key + ":\\s*([^\n]*)");
  return std::regex_search(status, m, line) ? m[2].str() : "";
}

// CPUs this test (and so the launcher it starts) may use.
std::string own_cpus() {
  return status_field(test::slurp("/proc/self/status"), "Cpus_allowed_list");
}

// Whether this machine can run the test (CPUs 0 and 1 usable), else says
// that it is skipped.
bool runs_here() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_ISSET(0, &set) && CPU_ISSET(1, &set))
    return true;
  WARN("needs CPUs 0 and 1; skipped");
  return false;
}

bool same_socket_0_1() {
  auto package = [](int cpu) {
    return test::slurp("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                       "/topology/physical_package_id");
  };
  return !package(0).empty() && package(0) == package(1);
}

// The memory policy a worker near NUMA node n gets: that node preferred
// when the machine has it, else none (the default).
std::string policy_near(int n) {
  bool exists = ::access(("/sys/devices/system/node/node" + std::to_string(n)).c_str(), F_OK) == 0;
  return exists ? "prefer:" + std::to_string(n) : "default";
}

struct Worker {
  std::string cpus;    // its Cpus_allowed_list
  std::string policy;  // its memory policy in numa_maps: prefer:N, default, …
};

struct Run {
  std::map<int, Worker> by_device;  // MUSTER_DEVICE -> what the worker saw
  std::string output;               // everything muster run wrote
  std::optional<int> code;
};

// A worker that says what the kernel gives it, then exits.
const char* kReport =
    "echo \"pin device=$MUSTER_DEVICE cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "
    "/proc/self/status) policy=$(head -n 1 /proc/self/numa_maps | grep -o -e 'prefer[^ ]*' -e "
    "default -e 'bind[^ ]*' -e 'interleave[^ ]*')\"";

Run run_job(const test::TestDaemon& d, std::vector<std::string> args,
            std::map<std::string, std::string> env = {}) {
  args.insert(args.end(), {"--", "sh", "-c", kReport});
  env["MUSTER_ENDPOINT"] = d.endpoint();
  test::Process p(test::muster_cmd("run", args), env, true);
  Run r;
  r.output = p.read_all(30s);
  r.code = p.wait(10s);
  std::regex pin("pin device=(-?[0-9]+) cpus=([^ ]*) policy=([^ \n]*)");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), pin), end; it != end; ++it)
    r.by_device[std::stoi((*it)[1])] = {(*it)[2], (*it)[3]};
  return r;
}

}  // namespace

TEST_CASE("each worker runs on its GPU's NUMA node's CPUs and prefers its memory") {
  if (!runs_here()) return;
  test::NvmlNode node(split_node());
  test::TestDaemon d({}, node.env());
  // The default with GPUs is node; GPUs 0 and 2 sit near CPUs 0 and 1.
  for (auto flags : {std::vector<std::string>{}, {"--numa-binding", "node"}}) {
    flags.insert(flags.begin(), {"-n", "2", "--devices", "0,2"});
    auto r = run_job(d, flags);
    INFO(r.output);
    CHECK(r.code == 0);
    REQUIRE(r.by_device.size() == 2);
    CHECK(r.by_device[0].cpus == "0");
    CHECK(r.by_device[2].cpus == "1");
    if (::access("/proc/self/numa_maps", F_OK) == 0) {
      CHECK(r.by_device[0].policy == policy_near(0));
      CHECK(r.by_device[2].policy == policy_near(1));
    }
    CHECK_THAT(r.output, Catch::Contains("muster: numa binding node: rank 0 → CPUs 0"));
    CHECK_THAT(r.output, Catch::Contains("rank 1 → CPUs 1"));
  }
  // socket: each its GPU's whole socket; here CPUs 0 and 1 share one.
  if (same_socket_0_1() && own_cpus() == "0-1") {
    auto r = run_job(d, {"-n", "2", "--devices", "0,2", "--numa-binding", "socket"});
    INFO(r.output);
    CHECK(r.code == 0);
    CHECK(r.by_device[0].cpus == "0-1");
    CHECK(r.by_device[2].cpus == "0-1");
    CHECK_THAT(r.output, Catch::Contains("muster: numa binding socket: rank 0 → CPUs 0-1 (node 0), "
                                         "rank 1 → CPUs 0-1"));
  }
}

TEST_CASE("--numa-binding none, and CPU jobs by default, leave workers on the launcher's CPUs") {
  if (!runs_here()) return;
  test::NvmlNode node(split_node());
  test::TestDaemon d({}, node.env());
  const std::string launcher = own_cpus();
  REQUIRE(launcher != "0");
  SECTION("none, on the command line or as PET_NUMA_BINDING") {
    for (auto [flags, env] : {std::pair{std::vector<std::string>{"--numa-binding", "none"},
                                        std::map<std::string, std::string>{}},
                              {{}, {{"PET_NUMA_BINDING", "none"}}}}) {
      flags.insert(flags.begin(), {"-n", "2", "--devices", "0,2"});
      auto r = run_job(d, flags, env);
      INFO(r.output);
      CHECK(r.code == 0);
      REQUIRE(r.by_device.size() == 2);
      for (auto& [device, w] : r.by_device) {
        CHECK(w.cpus == launcher);
        if (::access("/proc/self/numa_maps", F_OK) == 0) CHECK(w.policy == "default");
      }
      CHECK_THAT(r.output, Catch::Contains("muster: numa binding none"));
    }
  }
  SECTION("--cpu: not pinned, and nothing said") {
    auto r = run_job(d, {"-n", "2", "--cpu"});
    INFO(r.output);
    CHECK(r.code == 0);
    REQUIRE(r.by_device.size() == 1);  // both report device -1
    CHECK(r.by_device[-1].cpus == launcher);
    CHECK_THAT(r.output, !Catch::Contains("numa binding"));
  }
  SECTION("--cpu with --numa-binding node: nothing to be near, said so") {
    auto r = run_job(d, {"-n", "2", "--cpu", "--numa-binding", "node"});
    INFO(r.output);
    CHECK(r.code == 0);
    CHECK(r.by_device[-1].cpus == launcher);
    CHECK_THAT(r.output, Catch::Contains("numa binding none; a job without GPUs has nothing "
                                         "to be near"));
  }
}

TEST_CASE("ranks that would share fewer CPUs than they are widen the binding, and say so") {
  if (!runs_here()) return;
  SECTION("two ranks on one CPU's node: its socket") {
    test::NvmlNode node(split_node());
    test::TestDaemon d({}, node.env());
    auto r = run_job(d, {"-n", "2", "--devices", "0,1"});
    INFO(r.output);
    CHECK(r.code == 0);
    REQUIRE(r.by_device.size() == 2);
    CHECK_THAT(r.output, Catch::Contains("widened from node: 2 ranks share CPUs 0 (1 CPU)"));
    // Never tighter than the cores allow: not both on CPU 0.
    CHECK(r.by_device[0].cpus != "0");
    CHECK(r.by_device[1].cpus != "0");
    if (same_socket_0_1() && own_cpus() == "0-1") {
      CHECK_THAT(r.output, Catch::Contains("muster: numa binding socket: ranks 0-1 → CPUs 0-1"));
      CHECK(r.by_device[0].cpus == "0-1");
    }
  }
  SECTION("four ranks whose GPUs all sit near CPU 0") {
    test::NvmlNode node(four_gpus({"0", "0", "0", "0"}, {0, 0, 0, 0}));
    test::TestDaemon d({}, node.env());
    auto r = run_job(d, {"-n", "4", "--numa-binding", "node"});
    INFO(r.output);
    CHECK(r.code == 0);
    REQUIRE(r.by_device.size() == 4);
    CHECK_THAT(r.output, Catch::Contains("widened from node: 4 ranks share CPUs 0 (1 CPU)"));
    for (auto& [device, w] : r.by_device) CHECK(w.cpus != "0");
    if (same_socket_0_1() && own_cpus() == "0-1") {
      // The socket has two CPUs for four ranks: not pinned at all.
      CHECK_THAT(r.output, Catch::Contains("muster: numa binding none; widened from node"));
      CHECK_THAT(r.output, Catch::Contains("widened from socket: 4 ranks share CPUs 0-1"));
      for (auto& [device, w] : r.by_device) CHECK(w.cpus == "0-1");
    }
  }
}

TEST_CASE("only CPUs the launcher may use: a GPU near none of them leaves its rank unpinned") {
  if (!runs_here()) return;
  if (::access("/usr/bin/taskset", X_OK) != 0) {
    WARN("needs taskset; skipped");
    return;
  }
  test::NvmlNode node(split_node());
  test::TestDaemon d({}, node.env());
  // As a Slurm job's cgroup or a container might: the launcher on CPU 1.
  std::vector<std::string> argv{"/usr/bin/taskset", "-c", "1"};
  for (auto& a :
       test::muster_cmd("run", {"-n", "2", "--devices", "0,2", "--", "sh", "-c", kReport}))
    argv.push_back(a);
  test::Process p(argv, {{"MUSTER_ENDPOINT", d.endpoint()}}, true);
  auto out = p.read_all(30s);
  INFO(out);
  CHECK(p.wait(10s) == 0);
  CHECK_THAT(out, Catch::Contains("rank 0 not pinned (GPU 0's CPUs 0 are none of the CPUs this "
                                  "launcher may use (1))"));
  CHECK_THAT(out, Catch::Contains("rank 1 → CPUs 1"));
  CHECK_THAT(out,
             Catch::Contains("pin device=0 cpus=1 ") && Catch::Contains("pin device=2 cpus=1 "));
}

TEST_CASE("muster status shows the CPUs a running rank may use") {
  if (!runs_here()) return;
  test::NvmlNode node(split_node());
  test::TestDaemon d({}, node.env());
  test::Process run(test::muster_cmd("run", {"-n", "2", "--devices", "0,2", "--", "sh", "-c",
                                             "echo ready; exec sleep 60"}),
                    {{"MUSTER_ENDPOINT", d.endpoint()}}, true);
  std::string output;
  for (int ready = 0; ready < 2;) {
    auto line = run.read_line(20s);
    REQUIRE(line);
    output += *line + "\n";
    if (line->find("ready") != std::string::npos) ++ready;
  }
  INFO(output);
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.jobs.size() == 1);
  REQUIRE(s.jobs[0].ranks.size() == 2);
  // The choice, as muster run's attach said it (the default with GPUs).
  CHECK(s.jobs[0].numa_binding == "node");
  for (const auto& r : s.jobs[0].ranks) {
    INFO("device " << r.device);
    CHECK(r.cpus == (r.device == 0 ? "0" : "1"));
    // The kernel's word, the same the rank's own /proc shows.
    CHECK(r.cpus == status_field(test::slurp("/proc/" + std::to_string(r.pid) + "/status"),
                                 "Cpus_allowed_list"));
  }
  test::Process json(test::muster_cmd("status", {"--json"}), {{"MUSTER_ENDPOINT", d.endpoint()}});
  auto text = json.read_all(20s);
  CHECK(json.wait(10s) == 0);
  CHECK_THAT(text, Catch::Contains("\"cpus\":\"0\"") && Catch::Contains("\"cpus\":\"1\""));
  CHECK_THAT(text, Catch::Contains("\"numa_binding\":\"node\""));
  test::Process table(test::muster_cmd("status", {}), {{"MUSTER_ENDPOINT", d.endpoint()}});
  auto rows = table.read_all(20s);
  CHECK(table.wait(10s) == 0);
  CHECK_THAT(rows, Catch::Contains("CPUS") && Catch::Contains("numa binding: node"));
  run.signal(SIGTERM);
  run.read_all(10s);
  run.wait(10s);
}

TEST_CASE("--numa-binding takes none, node or socket") {
  for (auto [value, says] :
       {std::pair{"foo",
                  "--numa-binding: invalid choice 'foo' (choose from 'none', 'node', "
                  "'socket')"},
        {"exclusive",
         "--numa-binding exclusive: torchrun's mode is not in muster; use node or "
         "socket"}}) {
    test::Process p(test::muster_cmd("run", {"--numa-binding", value, "--", "true"}), {}, true);
    auto out = p.read_all(20s);
    CHECK(p.wait(10s) == 2);
    CHECK_THAT(out, Catch::Contains(says));
  }
}
