// `muster run`'s options: torchrun's command line and muster's own.
// Parsing stops at the program: everything after it belongs to the program,
// as with torchrun.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/slurm_world.hpp"

namespace muster::cli {

struct RunOptions {
  uint32_t nproc = 1;
  std::string nproc_spec = "1";  // as given: N, gpu, cpu or auto (resolved at start)
  std::vector<int> devices;      // allowed subset for this job
  std::string job_id;            // empty: generated
  std::string owner;             // --owner USER|UID, as given (root only)
  int64_t owner_uid = -1;        // its uid; -1: the caller's own job
  bool use_env = false;          // `muster run`: a no-op (never appends)
  bool launch_style = false;     // `muster launch`: append --local_rank=N unless use_env
  bool cpu = false;
  bool no_python = false;
  bool module = false;    // -m: $MUSTER_PYTHON -u -m PROGRAM
  bool run_path = false;  // --run-path: $MUSTER_PYTHON -u PROGRAM, whatever its name
  bool standalone = false;
  std::string role = "default";  // ROLE_NAME
  std::string rdzv_backend = "c10d";
  double monitor_interval_s = 5.0;     // accepted; muster hears of exits at once
  std::string start_method = "spawn";  // accepted; muster always forks and execs
  int simulate_gpus = -1;              // for an embedded daemon only
  double grace_s = 30.0;               // SIGTERM -> SIGKILL: torchrun's 30 s
  double wait_gpus_s = 0;              // --wait-for-gpus: while none are free (0 = fail at once)
  int master_port = 0;                 // 0: pick a free one
  std::string master_addr;             // MASTER_ADDR on one node (default 127.0.0.1)
  uint32_t max_restarts = 0;           // restarts of the whole group after a failure
  bool prefix_output = true;           // `[rankN]: ` before each line of a worker
  bool store_relay = true;             // cli/store_relay.hpp: MASTER_PORT answers at once
  // Workers' CPUs and memory near their GPU: none, node or socket; "" is
  // the default, node for a job with GPUs and none for a CPU job.
  std::string numa_binding;
  // torchrun's --log-dir, --redirects, --tee ("" = none).
  std::string log_dir;
  std::string redirects;
  std::string tee;
  // Multi-node (torchrun's c10d rendezvous): nodes MIN..MAX through the
  // daemon at coordinator (host:port); empty coordinator = this node alone.
  uint32_t min_nodes = 1;
  uint32_t max_nodes = 1;
  std::string coordinator;
  std::string join_via;       // host:port of a relay that batches joins ("" = none)
  int node_rank = -1;         // fixed node order when >= 0
  double last_call_s = 30.0;  // after MIN nodes joined, wait this long for more
  double rdzv_timeout_s = 600.0;
  std::string local_addr;  // MASTER_ADDR when this node is node 0 (default: host name)
  // Peering of an embedded daemon (no node daemon answers).
  bool peer_plain = false;
  std::string peer_key_file;
  std::string peer_authorized_keys;
  // Slurm (issue #22): --slurm auto|on|off, and --slurm-task (each task of
  // the step is one rank). slurm_world is set when the world comes from
  // Slurm; coordinator_given when --rdzv-endpoint named the coordinator.
  std::string slurm = "auto";
  bool slurm_task = false;
  std::optional<SlurmWorld> slurm_world;
  bool coordinator_given = false;
  std::string program;
  std::vector<std::string> args;
};

// nullopt after printing --help. Throws std::runtime_error (exit 2).
// PET_<FLAG> variables of the environment are defaults, as torchrun's.
std::optional<RunOptions> parse_run_options(const std::vector<std::string>& args,
                                            bool launch_style = false);

}  // namespace muster::cli
