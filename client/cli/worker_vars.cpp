#include "cli/worker_vars.hpp"

#include <cstdlib>

#include "device_list.hpp"
#include "job_id.hpp"

extern char** environ;

namespace muster::cli {

std::vector<std::string> worker_env(const std::map<std::string, std::string>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (!set.count(kv.substr(0, kv.find('=')))) env.push_back(kv);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

std::map<std::string, std::string> worker_vars(const RunOptions& o, const std::string& endpoint,
                                               const std::string& job, const muster::World& at,
                                               const muster::Reservation& booked, uint32_t r,
                                               uint32_t restarts, const std::string& error_file,
                                               const std::optional<std::vector<int64_t>>& visible) {
  // The ordinal CUDA gives the leased GPU: its position among the visible
  // ones, else its NVML index (PCI bus order, as CUDA_DEVICE_ORDER below).
  int64_t device = booked.devices.at(r);
  if (visible && device >= 0) device = visible_ordinal(*visible, device);
  std::string rank = std::to_string(at.rank_offset + r);
  std::map<std::string, std::string> vars = {
      {"RANK", rank},
      {"LOCAL_RANK", std::to_string(r)},
      {"GROUP_RANK", std::to_string(at.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(at.num_nodes)},
      {"ROLE_RANK", rank},
      {"WORLD_SIZE", std::to_string(at.world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
      {"ROLE_WORLD_SIZE", std::to_string(at.world_size)},
      {"MASTER_ADDR", at.master_addr},
      {"MASTER_PORT", std::to_string(at.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(restarts)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
      {"TORCHELASTIC_RUN_ID", std::string(job_name(job))},
      {"MUSTER_ENDPOINT", endpoint},
      {"MUSTER_JOB_ID", std::string(job_name(job))},
      {"MUSTER_WANTS_GPU", o.cpu ? "0" : "1"},
      {"MUSTER_DEVICE", std::to_string(device)},
      // CUDA's own default order (fastest first) may differ from PCI bus
      // order on mixed nodes.
      {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
      {"MUSTER_GENERATION", std::to_string(at.generation)},
      {"ROLE_NAME", o.role},
      {"TORCHELASTIC_ERROR_FILE", error_file},
      // Workers make the store themselves (rank 0 hosts it); there is no
      // agent store to use, not even with --rdzv-backend static.
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
  };
  // --owner: the workers join that user's job, which the daemon lets them
  // do because this launcher registered their pids (attach).
  if (o.owner_uid >= 0) vars["MUSTER_JOB_OWNER"] = std::to_string(o.owner_uid);
  // torchrun's default: a hung NCCL collective ends the worker (and the job
  // restarts) instead of hanging it.
  for (const char* v : {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"})
    if (!std::getenv(v)) vars[v] = "1";
  // torchrun's default: N ranks on one node must not each spawn N threads.
  if (o.nproc > 1 && !std::getenv("OMP_NUM_THREADS")) vars["OMP_NUM_THREADS"] = "1";
  return vars;
}

}  // namespace muster::cli
