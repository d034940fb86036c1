// `muster run` as a task of srun (issue #22): the line that says the world
// came from Slurm, where the step's coordinator is, and --slurm-task, where
// each task of the step is one rank and becomes its program.
#pragma once

#include <optional>
#include <string>

#include "cli/run_options.hpp"

namespace muster::cli {

// For a world from Slurm (o.slurm_world): with no node daemon at endpoint
// (embedded daemons), moves the coordinator to the first host's derived
// port; prints the one line saying so. Returns whether a node daemon
// answered. Throws muster::Error when the endpoint is another user's.
bool settle_slurm_world(RunOptions& o, const std::string& endpoint);

// --slurm-task: books this node's ranks (local task 0, once every task of
// the node is there), joins the world, and execs PROGRAM in this task's
// place. Returns only on failure, with muster run's exit code, having said why.
int slurm_task_main(const RunOptions& o, const std::string& endpoint, bool node_daemon);

// Both of the above for a world from Slurm (nothing otherwise): muster
// run's exit code when it is done (a failure, said on stderr), nullopt to
// go on and start the node's workers.
std::optional<int> run_under_slurm(RunOptions& o, const std::string& endpoint);

}  // namespace muster::cli
