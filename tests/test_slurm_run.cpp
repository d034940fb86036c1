// `muster run` in a Slurm step, without Slurm: the step's variables as srun
// sets them (issue #22). The real Slurm is tests/slurm_cluster.sh's.
#include <catch2/catch.hpp>

#include <signal.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "support/muster_cli.hpp"
#include "support/process.hpp"

using namespace std::chrono_literals;
using muster::test::Process;
namespace test = muster::test;

namespace {

using Env = std::map<std::string, std::string>;

// A one-node step of job 77 (step 3), one task on "localhost".
Env step(Env more = {}) {
  Env e = {{"SLURM_JOB_ID", "77"},
           {"SLURM_STEP_ID", "3"},
           {"SLURM_STEP_NUM_NODES", "1"},
           {"SLURM_NODEID", "0"},
           {"SLURM_STEP_NODELIST", "localhost"},
           {"SLURMD_NODENAME", "localhost"},
           {"SLURM_PROCID", "0"},
           {"SLURM_LOCALID", "0"},
           {"SLURM_NTASKS", "1"},
           {"SLURM_STEP_TASKS_PER_NODE", "1"}};
  for (auto& [k, v] : more) e[k] = v;
  return e;
}

const std::vector<std::string> kShow = {"/bin/sh", "-c",
                                        "echo id=$TORCHELASTIC_RUN_ID nodes=$GROUP_WORLD_SIZE "
                                        "rank=$RANK dev=$MUSTER_DEVICE"};

}  // namespace

TEST_CASE("in a Slurm step muster run takes the job id from Slurm and says so in one line") {
  auto r = test::run_embedded({"-n", "2", "--cpu", kShow[0], kShow[1], kShow[2]}, step());
  INFO(r.text);
  CHECK(r.code == 0);
  CHECK_THAT(r.text, Catch::Contains("id=77.3 nodes=1 rank=0"));
  CHECK_THAT(r.text, Catch::Contains("id=77.3 nodes=1 rank=1"));
  CHECK_THAT(r.text, Catch::Contains("muster run: the world from Slurm: job 77.3, node 0 of 1 "
                                     "(localhost)\n"));
  // off, or an explicit world: Slurm's variables are not looked at.
  for (std::vector<std::string> flags :
       {std::vector<std::string>{"--slurm", "off"}, {"--standalone"}, {"--nnodes", "1"}}) {
    flags.insert(flags.end(), {"-n", "1", "--cpu", kShow[0], kShow[1], kShow[2]});
    auto other = test::run_embedded(flags, step());
    INFO(other.text);
    CHECK(other.code == 0);
    CHECK_THAT(other.text, !Catch::Contains("77.3") && !Catch::Contains("from Slurm"));
  }
}

TEST_CASE("bad Slurm settings exit 2 with a sentence before anything starts") {
  struct Case {
    std::vector<std::string> args;
    Env env;
    const char* says;
  };
  Env none = {{"SLURM_JOB_ID", ""}, {"SLURM_STEP_ID", ""}};
  for (const auto& c : std::vector<Case>{
           {{"--slurm", "on"}, none, "run muster run as a task of srun"},
           {{"--slurm", "maybe"}, step(), "--slurm: invalid choice 'maybe'"},
           {{"--slurm", "on", "--node-rank", "0"}, step(), "--node-rank contradicts it"},
           {{"--slurm-task", "-n", "2"}, step(), "--nproc-per-node contradicts it"},
           {{"--slurm-task", "--slurm", "off"}, step(), "--slurm off contradicts it"},
           {{"--slurm-task"}, none, "SLURM_JOB_ID and SLURM_STEP_ID are not both set"},
           {{"--slurm", "on"}, step({{"SLURM_STEP_NODELIST", "n[1-"}}), "SLURM_STEP_NODELIST"},
           // Two nodes, 2 tasks each, rank 1 on node 1: cyclic distribution.
           {{"--slurm-task"},
            step({{"SLURM_STEP_NUM_NODES", "2"},
                  {"SLURM_STEP_NODELIST", "n[1-2]"},
                  {"SLURM_NODEID", "1"},
                  {"SLURM_PROCID", "1"},
                  {"SLURM_NTASKS", "4"},
                  {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}}),
            "--distribution=block"},
       }) {
    auto args = c.args;
    args.insert(args.end(), {"--cpu", "/bin/true"});
    auto r = test::run_embedded(args, c.env);
    INFO(r.text);
    CHECK(r.code == 2);
    CHECK_THAT(r.text, Catch::Contains(c.says));
  }
}

TEST_CASE("--slurm-task without a node daemon is refused, not raced for by embedded daemons") {
  auto r = test::run_embedded({"--slurm-task", "--cpu", "/bin/true"}, step());
  INFO(r.text);
  CHECK(r.code == 1);
  CHECK_THAT(r.text, Catch::Contains("--slurm-task needs this node's musterd"));
  CHECK_THAT(r.text, Catch::Contains("srun --ntasks-per-node=1 muster run --nproc-per-node N"));
}

TEST_CASE("only the GPUs Slurm gave the step are leased") {
  // 4 GPUs on the node, the step got 1 and 3; the ordinals are NVML
  // indices without CUDA_VISIBLE_DEVICES, positions in it with.
  for (auto [cvd, want] : {std::pair<std::string, std::string>{"", "dev=1 dev=3 "},
                           {"1,3", "dev=0 dev=1 "},
                           {"0,1,2,3", "dev=1 dev=3 "}}) {
    auto r = test::run_embedded({"-n", "gpu", "--simulate-gpus", "4", kShow[0], kShow[1], kShow[2]},
                                step({{"SLURM_STEP_GPUS", "3,1"}, {"CUDA_VISIBLE_DEVICES", cvd}}));
    INFO(r.text);
    CHECK(r.code == 0);
    std::istringstream in(r.text);
    std::vector<std::string> devs;
    for (std::string w; in >> w;)
      if (w.rfind("dev=", 0) == 0) devs.push_back(w);
    std::sort(devs.begin(), devs.end());
    std::string got;
    for (const auto& d : devs) got += d + " ";
    CHECK(got == want);
  }
  // None of the visible GPUs is the step's: said, not leased.
  auto r = test::run_embedded({"-n", "1", "--simulate-gpus", "4", "/bin/true"},
                              step({{"SLURM_STEP_GPUS", "1,3"}, {"CUDA_VISIBLE_DEVICES", "0,2"}}));
  CHECK(r.code != 0);
  CHECK_THAT(r.text, Catch::Contains("SLURM_STEP_GPUS=1,3"));
}

TEST_CASE("SIGUSR1 sent to muster run reaches each worker once, and muster run carries on") {
  test::TempDir dir;
  std::string log = dir.path() + "/usr1";
  std::string script = "trap 'echo $RANK >> " + log + "' USR1; echo ready; " +
                       "i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); "
                       "[ -e " +
                       dir.path() + "/stop ] && exit 0; done; exit 9";
  auto env = test::embedded_env(dir.path() + "/rt");
  Process p(test::muster_cmd("run", {"-n", "2", "--cpu", "/bin/sh", "-c", script}), env);
  int ready = 0;
  while (ready < 2)
    if (auto line = p.read_line(30s)) {
      ready += line->find("ready") != std::string::npos;
    } else {
      FAIL("the workers did not start");
    }
  p.signal(SIGUSR1);
  std::string got;
  for (int i = 0; i < 100 && got.size() < 4; ++i) {
    std::this_thread::sleep_for(100ms);
    std::ifstream in(log);
    got.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::this_thread::sleep_for(500ms);  // a second copy would have come by now
  std::ifstream in(log);
  got.assign(std::istreambuf_iterator<char>(in), {});
  CHECK((got == "0\n1\n" || got == "1\n0\n"));
  std::ofstream(dir.path() + "/stop").put('x');
  CHECK(p.wait(20s) == 0);  // not killed by the signal: the workers' exit 0
}
