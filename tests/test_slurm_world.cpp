// Slurm's hostlists and the world a step's variables describe
// (client/cli/slurm_hostlist, client/cli/slurm_world): no Slurm needed.
#include <catch2/catch.hpp>
#include <set>
#include <stdexcept>

#include "cli/slurm_hostlist.hpp"
#include "cli/slurm_world.hpp"

using namespace muster::cli;
using Hosts = std::vector<std::string>;

TEST_CASE("a hostlist expands ranges, lists and plain names in order") {
  CHECK(expand_hostlist("gpu[01-04,07],login1") ==
        Hosts{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "login1"});
  CHECK(expand_hostlist("n1") == Hosts{"n1"});
  CHECK(expand_hostlist("n[1-2]") == Hosts{"n1", "n2"});
  CHECK(expand_hostlist("a,b c") == Hosts{"a", "b", "c"});
  CHECK(expand_hostlist("rack-[3]") == Hosts{"rack-3"});
}

TEST_CASE("a range keeps the zero padding of its lower bound") {
  CHECK(expand_hostlist("node[008-011]") == Hosts{"node008", "node009", "node010", "node011"});
  CHECK(expand_hostlist("x[8-10]") == Hosts{"x8", "x9", "x10"});
  CHECK(expand_hostlist("x[098-101]") == Hosts{"x098", "x099", "x100", "x101"});
}

TEST_CASE("several bracket groups in one name multiply, the first outermost") {
  CHECK(expand_hostlist("a[1-2]b[3-4]") == Hosts{"a1b3", "a1b4", "a2b3", "a2b4"});
  CHECK(expand_hostlist("r[1-2]n[01,03]-ib,x") ==
        Hosts{"r1n01-ib", "r1n03-ib", "r2n01-ib", "r2n03-ib", "x"});
}

TEST_CASE("a bad hostlist is refused with a sentence") {
  for (const char* bad : {"gpu[01-04", "gpu01-04]", "a[1-[2-3]]", "a[3-1]", "a[]", "a[x]",
                          "a[1-2-3]", "a,,b", "", "a[1,]", "b]["})
    CHECK_THROWS_AS(expand_hostlist(bad), std::invalid_argument);
  CHECK_THROWS_WITH(expand_hostlist("a[3-1]"), Catch::Contains("runs backwards"));
  CHECK_THROWS_WITH(expand_hostlist("a[1-[2]]"), Catch::Contains("nest"));
  // No list may expand into millions of names.
  CHECK_THROWS_WITH(expand_hostlist("a[0-99999999]"), Catch::Contains("more than"));
  CHECK_THROWS_WITH(expand_hostlist("a[0-999]b[0-999]"), Catch::Contains("more than"));
  CHECK(expand_hostlist("a[0-65535]").size() == kMaxHosts);
}

TEST_CASE("task counts per node expand Slurm's N(xK) form") {
  CHECK(expand_tasks_per_node("2(x3),1") == std::vector<uint32_t>{2, 2, 2, 1});
  CHECK(expand_tasks_per_node("4") == std::vector<uint32_t>{4});
  for (const char* bad : {"", "0", "2(x0)", "2(x", "a", "2,,1", "2(x3"})
    CHECK_THROWS_AS(expand_tasks_per_node(bad), std::invalid_argument);
}

namespace {

// The variables srun gives the task with global rank `rank` of
// `srun -N2 --ntasks-per-node=2` (block distribution).
EnvMap step_env(int rank) {
  return {{"SLURM_JOB_ID", "4711"},
          {"SLURM_STEP_ID", "3"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_NODEID", std::to_string(rank / 2)},
          {"SLURM_STEP_NODELIST", "gpu[07-08]"},
          {"SLURMD_NODENAME", rank / 2 ? "gpu08" : "gpu07"},
          {"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_LOCALID", std::to_string(rank % 2)},
          {"SLURM_NTASKS", "4"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}};
}

}  // namespace

TEST_CASE("auto takes the world from Slurm in a step, and only without explicit world flags") {
  EnvMap none;
  EnvMap batch = {{"SLURM_JOB_ID", "4711"}};  // the batch script: no step
  auto step = step_env(0);
  CHECK_FALSE(use_slurm(SlurmMode::kAuto, none, {}));
  CHECK_FALSE(use_slurm(SlurmMode::kAuto, batch, {}));
  CHECK(use_slurm(SlurmMode::kAuto, step, {}));
  for (const char* flag : {"nnodes", "node-rank", "rdzv-endpoint", "standalone"})
    CHECK_FALSE(use_slurm(SlurmMode::kAuto, step, {flag}));
  CHECK_FALSE(use_slurm(SlurmMode::kOff, step, {}));
  CHECK(use_slurm(SlurmMode::kOn, step, {}));
  // on: an explicit coordinator is allowed, the other world flags contradict.
  CHECK(use_slurm(SlurmMode::kOn, step, {"rdzv-endpoint"}));
  CHECK_THROWS_WITH(use_slurm(SlurmMode::kOn, step, {"nnodes"}),
                    Catch::Contains("--nnodes contradicts"));
  CHECK_THROWS_WITH(use_slurm(SlurmMode::kOn, batch, {}), Catch::Contains("SLURM_STEP_ID"));
  CHECK_THROWS_WITH(use_slurm(SlurmMode::kOn, none, {}), Catch::Contains("srun"));
  CHECK(slurm_mode_from_string("on") == SlurmMode::kOn);
  CHECK_THROWS_AS(slurm_mode_from_string("yes"), std::invalid_argument);
}

TEST_CASE("a step's variables give the job id, node count, node rank and first host") {
  auto w = slurm_world(step_env(3), false);
  CHECK(w.job_id == "4711.3");
  CHECK(w.num_nodes == 2);
  CHECK(w.node_rank == 1);
  CHECK(w.hosts == Hosts{"gpu07", "gpu08"});
  CHECK(w.node_name == "gpu08");
  CHECK_FALSE(w.step_gpus);
  // The same ports on every node of the step, in the documented ranges.
  auto w0 = slurm_world(step_env(0), false);
  CHECK(w0.coordinator_port == w.coordinator_port);
  CHECK(w.coordinator_port == kSlurmCoordinatorBase + slurm_port_offset(4711, 3));
  CHECK(w.master_port == kSlurmMasterBase + slurm_port_offset(4711, 3));
}

TEST_CASE("one task per GPU: rank, local rank and world from the task's variables") {
  for (int r = 0; r < 4; ++r) {
    auto w = slurm_world(step_env(r), true);
    CHECK(w.rank == static_cast<uint32_t>(r));
    CHECK(w.local_rank == static_cast<uint32_t>(r % 2));
    CHECK(w.world_size == 4);
    CHECK(w.local_world_size == 2);
  }
  // Uneven nodes: 3 tasks on node 0, 1 on node 1.
  auto env = step_env(3);
  env["SLURM_STEP_TASKS_PER_NODE"] = "3,1";
  env["SLURM_LOCALID"] = "0";
  auto w = slurm_world(env, true);
  CHECK(w.local_world_size == 1);
  CHECK(w.rank == 3);
}

TEST_CASE("cyclic ranks and missing or malformed variables are refused naming the variable") {
  auto cyclic = step_env(1);  // rank 1 on node 1 local 0: cyclic distribution
  cyclic["SLURM_NODEID"] = "1";
  cyclic["SLURM_LOCALID"] = "0";
  CHECK_THROWS_WITH(slurm_world(cyclic, true), Catch::Contains("--distribution=block"));
  CHECK_NOTHROW(slurm_world(cyclic, false));  // one task per node: not per task
  for (const char* var : {"SLURM_JOB_ID", "SLURM_STEP_NUM_NODES", "SLURM_NODEID"}) {
    auto env = step_env(0);
    env.erase(var);
    CHECK_THROWS_WITH(slurm_world(env, false), Catch::Contains(var));
    env[var] = "x1";
    CHECK_THROWS_WITH(slurm_world(env, false), Catch::Contains(var));
  }
  auto env = step_env(0);
  env["SLURM_STEP_NUM_NODES"] = "3";  // the list names 2
  CHECK_THROWS_WITH(slurm_world(env, false), Catch::Contains("SLURM_STEP_NODELIST"));
  env = step_env(0);
  env["SLURM_STEP_NODELIST"] = "gpu[07-";
  CHECK_THROWS_WITH(slurm_world(env, false), Catch::Contains("SLURM_STEP_NODELIST"));
  env = step_env(0);
  env.erase("SLURM_PROCID");
  CHECK_THROWS_WITH(slurm_world(env, true), Catch::Contains("SLURM_PROCID"));
  env = step_env(0);
  env["SLURM_NTASKS"] = "5";
  CHECK_THROWS_WITH(slurm_world(env, true), Catch::Contains("disagree"));
}

TEST_CASE("the step's GPUs come from SLURM_STEP_GPUS, in PCI (index) order") {
  auto env = step_env(0);
  env["SLURM_STEP_GPUS"] = "3,1";
  env["SLURM_JOB_GPUS"] = "0,1,2,3";
  auto w = slurm_world(env, false);
  REQUIRE(w.step_gpus);
  CHECK(*w.step_gpus == std::vector<int64_t>{1, 3});
  env.erase("SLURM_STEP_GPUS");
  CHECK(*slurm_world(env, false).step_gpus == std::vector<int64_t>{0, 1, 2, 3});
  env["SLURM_STEP_GPUS"] = "1,x";
  CHECK_THROWS_WITH(slurm_world(env, false), Catch::Contains("SLURM_STEP_GPUS"));
}

TEST_CASE("ports derived from the job id differ for the steps of recent jobs") {
  std::set<int> seen;
  for (uint64_t job = 100000; job < 100000 + kSlurmPortSpan; ++job)
    CHECK(seen.insert(slurm_port_offset(job, 0)).second);
  CHECK(slurm_port_offset(7, 0) != slurm_port_offset(7, 1));
  CHECK(kSlurmCoordinatorBase + kSlurmPortSpan <= kSlurmMasterBase);
  CHECK(kSlurmMasterBase + kSlurmPortSpan < 29400);
}
