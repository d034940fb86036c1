// Which of the node's GPUs a run may lease: muster run's own
// CUDA_VISIBLE_DEVICES (a scheduler's or a container's) and --devices.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/run_options.hpp"

namespace muster::cli {

// NVML indices of the visible GPUs, in CUDA_VISIBLE_DEVICES' order; nullopt
// when it is unset or the daemon has no GPUs. Throws std::runtime_error
// when it leaves none of the node's GPUs visible.
std::optional<std::vector<int64_t>> visible_gpus(const std::string& endpoint);

// The NVML indices the job may lease (empty: any): under Slurm, only the
// step's GPUs (SLURM_STEP_GPUS); throws std::runtime_error when none is left.
std::vector<int> allowed_devices(const RunOptions& o,
                                 const std::optional<std::vector<int64_t>>& visible);

}  // namespace muster::cli
