// A worker's environment: torchrun's variables for its place in the world,
// muster's own for libmuster, over muster run's environment.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/run_options.hpp"
#include "muster/launcher.hpp"

namespace muster::cli {

// muster run's environment with `set` put over it, as execve wants it.
std::vector<std::string> worker_env(const std::map<std::string, std::string>& set);

// The variables torchrun sets for local rank r, and muster's own. at: the
// world the worker's node is in (this node alone, or its part of the world
// the coordinator formed). visible: the GPUs the worker sees (run_gpus.hpp),
// for its ordinal.
std::map<std::string, std::string> worker_vars(const RunOptions& o, const std::string& endpoint,
                                               const std::string& job, const muster::World& at,
                                               const muster::Reservation& booked, uint32_t r,
                                               uint32_t restarts, const std::string& error_file,
                                               const std::optional<std::vector<int64_t>>& visible);

}  // namespace muster::cli
