#include "cli/slurm_world.hpp"

#include <algorithm>
#include <stdexcept>

#include "cli/slurm_hostlist.hpp"
#include "device_list.hpp"
#include "split.hpp"

namespace muster::cli {

namespace {

std::string get(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

uint64_t number(const std::string& s, const std::string& what, uint64_t max) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument(what + " is not a number");
  uint64_t v = std::stoull(s);
  if (v > max) throw std::invalid_argument(what + " is above " + std::to_string(max));
  return v;
}

// A variable Slurm sets for every task: present and a number up to max.
uint64_t required(const EnvMap& env, const char* name, uint64_t max) {
  std::string v = get(env, name);
  if (v.empty())
    throw std::runtime_error(std::string(name) +
                             " is not set, though SLURM_JOB_ID and SLURM_STEP_ID are: run "
                             "muster run as a task of srun, or give --slurm off to ignore "
                             "Slurm's variables (left over from another job or step)");
  try {
    return number(v, std::string(name) + "='" + v + "'", max);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
}

// The per-task fields, checked against each other.
void read_tasks(const EnvMap& env, SlurmWorld& w) {
  w.rank = static_cast<uint32_t>(required(env, "SLURM_PROCID", 1u << 20));
  w.local_rank = static_cast<uint32_t>(required(env, "SLURM_LOCALID", 4095));
  const char* total = env.count("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  w.world_size = static_cast<uint32_t>(required(env, total, 1u << 20));
  std::string spec = get(env, "SLURM_STEP_TASKS_PER_NODE");
  if (spec.empty()) spec = get(env, "SLURM_TASKS_PER_NODE");
  std::vector<uint32_t> per_node;
  try {
    per_node = expand_tasks_per_node(spec);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("SLURM_STEP_TASKS_PER_NODE: ") + e.what());
  }
  if (per_node.size() != w.num_nodes)
    throw std::runtime_error("SLURM_STEP_TASKS_PER_NODE='" + spec + "' names " +
                             std::to_string(per_node.size()) + " node(s), the step has " +
                             std::to_string(w.num_nodes));
  uint64_t before = 0, sum = 0;
  for (uint32_t n = 0; n < per_node.size(); ++n) {
    if (n < w.node_rank) before += per_node[n];
    sum += per_node[n];
  }
  w.local_world_size = per_node[w.node_rank];
  if (sum != w.world_size || w.local_rank >= w.local_world_size)
    throw std::runtime_error("the step's task counts disagree (" + std::string(total) + "=" +
                             std::to_string(w.world_size) + ", SLURM_STEP_TASKS_PER_NODE='" + spec +
                             "', SLURM_LOCALID=" + std::to_string(w.local_rank) + ")");
  if (before + w.local_rank != w.rank)
    throw std::runtime_error(
        "task " + std::to_string(w.rank) + " is local task " + std::to_string(w.local_rank) +
        " of node " + std::to_string(w.node_rank) +
        ": muster numbers ranks node after node (Slurm's block distribution, the default); "
        "run srun with --distribution=block");
}

}  // namespace

SlurmMode slurm_mode_from_string(const std::string& s) {
  if (s == "auto") return SlurmMode::kAuto;
  if (s == "on") return SlurmMode::kOn;
  if (s == "off") return SlurmMode::kOff;
  throw std::invalid_argument("invalid choice '" + s + "' (choose from 'auto', 'on', 'off')");
}

bool use_slurm(SlurmMode mode, const EnvMap& env, const std::vector<std::string>& explicit_world) {
  bool in_step = !get(env, "SLURM_JOB_ID").empty() && !get(env, "SLURM_STEP_ID").empty();
  if (mode == SlurmMode::kOff) return false;
  if (mode == SlurmMode::kAuto) return in_step && explicit_world.empty();
  if (!in_step)
    throw std::runtime_error(
        "--slurm on: SLURM_JOB_ID and SLURM_STEP_ID are not both set; run muster run as a "
        "task of srun (inside sbatch or salloc: srun ... muster run ...)");
  for (const auto& flag : explicit_world)
    if (flag != "rdzv-endpoint")
      throw std::runtime_error("--slurm on takes the world from Slurm; --" + flag +
                               " contradicts it");
  return true;
}

std::vector<uint32_t> expand_tasks_per_node(const std::string& spec) {
  if (spec.empty()) throw std::invalid_argument("not set");
  std::vector<uint32_t> out;
  for (auto item : split(spec)) {
    uint64_t times = 1;
    auto paren = item.find("(x");
    if (paren != std::string::npos) {
      if (item.back() != ')') throw std::invalid_argument("'" + item + "' is not N or N(xK)");
      times = number(item.substr(paren + 2, item.size() - paren - 3), "'" + item + "'", 65536);
      item = item.substr(0, paren);
    }
    uint64_t n = number(item, "'" + item + "'", 4096);
    if (n == 0 || times == 0 || out.size() + times > 65536)
      throw std::invalid_argument("'" + spec + "' is not a list of task counts");
    out.insert(out.end(), times, static_cast<uint32_t>(n));
  }
  return out;
}

int slurm_port_offset(uint64_t job, uint64_t step) {
  return static_cast<int>((job % kSlurmPortSpan * 31 + step) % kSlurmPortSpan);
}

SlurmWorld slurm_world(const EnvMap& env, bool tasks) {
  SlurmWorld w;
  uint64_t job = required(env, "SLURM_JOB_ID", UINT32_MAX);
  uint64_t step = required(env, "SLURM_STEP_ID", UINT32_MAX);
  w.job_id = std::to_string(job) + "." + std::to_string(step);
  w.num_nodes = static_cast<uint32_t>(required(env, "SLURM_STEP_NUM_NODES", 65536));
  w.node_rank = static_cast<uint32_t>(required(env, "SLURM_NODEID", 65535));
  std::string list = get(env, "SLURM_STEP_NODELIST");
  try {
    w.hosts = expand_hostlist(list);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("SLURM_STEP_NODELIST: ") + e.what());
  }
  if (w.num_nodes == 0 || w.hosts.size() != w.num_nodes || w.node_rank >= w.num_nodes)
    throw std::runtime_error("SLURM_STEP_NODELIST='" + list + "' names " +
                             std::to_string(w.hosts.size()) +
                             " node(s), SLURM_STEP_NUM_NODES=" + std::to_string(w.num_nodes) +
                             ", SLURM_NODEID=" + std::to_string(w.node_rank));
  w.node_name = get(env, "SLURMD_NODENAME");
  for (const char* name : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}) {
    std::string v = get(env, name);
    if (v.empty()) continue;
    try {
      w.step_gpus = parse_device_list(v);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(std::string(name) + "='" + v + "': " + e.what());
    }
    std::sort(w.step_gpus->begin(), w.step_gpus->end());  // CUDA's order: PCI bus order
    break;
  }
  int k = slurm_port_offset(job, step);
  w.coordinator_port = kSlurmCoordinatorBase + k;
  w.master_port = kSlurmMasterBase + k;
  if (tasks) read_tasks(env, w);
  return w;
}

}  // namespace muster::cli
