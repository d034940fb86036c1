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

// What a worker's rank and world are: this node alone, or its part of the
// world the coordinator formed.
struct Placement {
  uint32_t rank_offset = 0;
  uint32_t world_size = 1;
  uint32_t node_rank = 0;
  uint32_t num_nodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  uint64_t generation = 0;
};

// muster run's environment with `set` put over it, as execve wants it.
std::vector<std::string> worker_env(const std::map<std::string, std::string>& set);

// The variables torchrun sets for local rank r, and muster's own.
// visible: the GPUs the worker sees (run_gpus.hpp), for its ordinal.
std::map<std::string, std::string> worker_vars(const RunOptions& o, const std::string& endpoint,
                                               const std::string& job, const Placement& at,
                                               const muster::Reservation& booked, uint32_t r,
                                               uint32_t restarts, const std::string& error_file,
                                               const std::optional<std::vector<int64_t>>& visible);

}  // namespace muster::cli
