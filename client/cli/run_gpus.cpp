#include "cli/run_gpus.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "device_list.hpp"
#include "muster/client.hpp"
#include "muster/status.hpp"

namespace muster::cli {

// The GPUs that muster run's own CUDA_VISIBLE_DEVICES (a scheduler's or a
// container's) leaves visible, as NVML indices in its order, its integers
// counting the GPUs CUDA sees here (a cgroup's or container's subset);
// nullopt when every GPU is visible (ordinals are NVML indices), and on a
// daemon without GPUs (CPU jobs, as without it).
std::optional<std::vector<int64_t>> visible_gpus(const std::string& endpoint) {
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  std::vector<SeenGpu> gpus;
  for (const auto& d : Client({endpoint}).status().devices) {
    if (gpus.size() <= d.index) gpus.resize(d.index + 1);
    gpus[d.index] = {d.uuid, d.pci_bus_id, lost_reason(d.reason)};
  }
  auto v = muster::visible_gpus(cvd, gpus);
  if (v && v->empty())
    throw std::runtime_error(cvd ? std::string("CUDA_VISIBLE_DEVICES='") + cvd +
                                       "' leaves none of this node's GPUs visible (use --cpu for "
                                       "a job without GPUs)"
                                 : std::string("none of this node's GPUs can be opened here (a "
                                               "cgroup or container allows none; use --cpu for a "
                                               "job without GPUs)"));
  return v;
}

namespace {

// Under Slurm, of `wanted` (empty: any) only the step's GPUs.
std::vector<int> within_step(const RunOptions& o, std::vector<int> wanted) {
  if (o.cpu || !o.slurm_world || !o.slurm_world->step_gpus) return wanted;
  const auto& step = *o.slurm_world->step_gpus;
  if (wanted.empty()) return {step.begin(), step.end()};
  std::vector<int> out;
  for (int d : wanted)
    if (std::find(step.begin(), step.end(), d) != step.end()) out.push_back(d);
  if (out.empty()) {
    std::string list;
    for (auto d : step) list += (list.empty() ? "" : ",") + std::to_string(d);
    throw std::runtime_error(
        "none of the GPUs this run may lease (CUDA_VISIBLE_DEVICES, "
        "--devices) is among those Slurm gave the step (SLURM_STEP_GPUS=" +
        list + ")");
  }
  return out;
}

std::vector<int> visible_allowed(const RunOptions& o,
                                 const std::optional<std::vector<int64_t>>& visible) {
  if (!visible) return {o.devices.begin(), o.devices.end()};
  if (o.devices.empty()) return {visible->begin(), visible->end()};
  std::vector<int> out;
  for (int p : o.devices) {
    if (static_cast<size_t>(p) >= visible->size())
      throw std::runtime_error("--devices " + std::to_string(p) +
                               ": CUDA_VISIBLE_DEVICES leaves only " +
                               std::to_string(visible->size()) + " GPU(s) visible, positions 0.." +
                               std::to_string(visible->size() - 1));
    out.push_back(static_cast<int>((*visible)[p]));
  }
  return out;
}

}  // namespace

// The GPUs the job may lease: --devices counts positions in
// CUDA_VISIBLE_DEVICES when it is set, without --devices only the visible
// GPUs may be leased, and under Slurm only the step's (SLURM_STEP_GPUS).
std::vector<int> allowed_devices(const RunOptions& o,
                                 const std::optional<std::vector<int64_t>>& visible) {
  return within_step(o, visible_allowed(o, visible));
}

}  // namespace muster::cli
