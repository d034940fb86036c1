// The world of a job step, as Slurm's variables describe it to each task:
// `srun muster run` needs no --nnodes, --node-rank, --coordinator or
// --job-id. Pure functions of an environment map, so that they are tested
// without Slurm.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace muster::cli {

using EnvMap = std::map<std::string, std::string>;

// --slurm auto|on|off.
enum class SlurmMode { kAuto, kOn, kOff };
// Throws std::invalid_argument for anything but auto, on and off.
SlurmMode slurm_mode_from_string(const std::string& s);

// Whether the world comes from Slurm. auto: when SLURM_JOB_ID and
// SLURM_STEP_ID are set (a task of `srun`, not the batch script) and
// explicit_world (one of --nnodes, --node-rank, --rdzv-endpoint,
// --standalone given) is empty. on: always; throws std::runtime_error when
// the variables are missing or explicit_world names a contradicting flag.
bool use_slurm(SlurmMode mode, const EnvMap& env, const std::vector<std::string>& explicit_world);

// One task's view of its step.
struct SlurmWorld {
  std::string job_id;              // "SLURM_JOB_ID.SLURM_STEP_ID"
  uint32_t num_nodes = 1;          // SLURM_STEP_NUM_NODES
  uint32_t node_rank = 0;          // SLURM_NODEID
  std::vector<std::string> hosts;  // SLURM_STEP_NODELIST expanded; hosts[0] is node 0
  std::string node_name;           // SLURMD_NODENAME ("" when unset)
  // Per task (--slurm-task): SLURM_PROCID, SLURM_LOCALID, the step's task
  // count (SLURM_STEP_NUM_TASKS, else SLURM_NTASKS) and this node's
  // (SLURM_STEP_TASKS_PER_NODE's entry for node_rank).
  uint32_t rank = 0;
  uint32_t local_rank = 0;
  uint32_t world_size = 1;
  uint32_t local_world_size = 1;
  // The GPUs Slurm gave the step on this node (SLURM_STEP_GPUS, else
  // SLURM_JOB_GPUS), as NVML indices; nullopt when neither is set.
  std::optional<std::vector<int64_t>> step_gpus;
  // Ports derived from the job and step ids (embedded_ports()).
  int coordinator_port = 0;
  int master_port = 0;
};

// The world of SLURM_* in env. Throws std::runtime_error naming the variable
// that is missing or malformed. With tasks, the per-task fields are read and
// checked: the ranks must be Slurm's block distribution (node after node),
// which is the order muster gives ranks in.
SlurmWorld slurm_world(const EnvMap& env, bool tasks);

// "2(x3),1" (SLURM_STEP_TASKS_PER_NODE): 2 2 2 1. Throws std::invalid_argument.
std::vector<uint32_t> expand_tasks_per_node(const std::string& spec);

// The ports of a step that uses embedded daemons, the same on every node:
// the first node's embedded daemon listens for the others on
// kSlurmCoordinatorBase + k, and with --slurm-task rank 0's store on
// kSlurmMasterBase + k, where k = (job * 31 + step) mod kSlurmPortSpan.
// Both ranges lie below musterd's peer port (29400), torch's usual
// MASTER_PORT (29500) and Linux's ephemeral ports (32768 and up); 31 and
// the span are coprime, so steps of the last kSlurmPortSpan jobs never share
// a port.
inline constexpr int kSlurmCoordinatorBase = 21000;
inline constexpr int kSlurmMasterBase = 25000;
inline constexpr int kSlurmPortSpan = 4000;
int slurm_port_offset(uint64_t job, uint64_t step);

}  // namespace muster::cli
