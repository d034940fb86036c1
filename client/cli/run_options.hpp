// `muster run`'s options. Parsing stops at the program: everything after it
// belongs to the program, as with torchrun.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace muster::cli {

struct RunOptions {
  uint32_t nproc = 1;
  std::vector<int> devices;  // allowed subset for this job
  std::string job_id;        // empty: generated
  bool use_env = false;
  bool cpu = false;
  bool no_python = false;
  int simulate_gpus = -1;     // for an embedded daemon only
  double grace_s = 5.0;       // SIGTERM -> SIGKILL
  int master_port = 0;        // 0: pick a free one
  uint32_t max_restarts = 0;  // restarts of the whole group after a failure
  bool prefix_output = true;  // `[rankN]: ` before each line of a worker
  std::string program;
  std::vector<std::string> args;
};

// nullopt after printing --help. Throws std::runtime_error (exit 2).
std::optional<RunOptions> parse_run_options(const std::vector<std::string>& args);

}  // namespace muster::cli
