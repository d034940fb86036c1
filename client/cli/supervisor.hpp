// Supervising a group of workers: muster run waits for them, stops them all
// when one fails or the user asks, and leaves nothing behind. muster run is
// a subreaper, so grandchildren cannot escape either, and a guardian
// process kills the workers should muster run itself die.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cli/spawn.hpp"

namespace muster::cli {

// Blocks the signals supervise() waits for and starts the guardian; call
// once, before any thread starts. At exit muster run closes its end of the
// guardian's pipe and waits (up to 2 s) until the guardian is gone.
void block_supervisor_signals();
// Takes a pending SIGINT/SIGTERM/SIGHUP off the queue; 0 when none waits.
int take_pending_stop_signal();

// How a group of workers ended.
struct Outcome {
  int code = 0;              // muster run's exit code
  bool interrupted = false;  // muster run got SIGINT/SIGTERM/SIGHUP
  int rank = -1;             // the first failing worker, -1 for none
  std::string how;           // "exited with code 3", "was killed by signal 9 (SIGKILL)"
  // Set when world_check stopped the group: why (a node lost, nodes waiting).
  std::string world_changed;
};

// Waits for all workers. The first failure stops the rest (SIGTERM, then
// SIGKILL after grace_s); SIGINT/SIGTERM/SIGHUP are forwarded the same way.
// SIGUSR1, SIGUSR2 and SIGCONT are passed on to the workers, unless Slurm's
// step daemon sent them (it signals the workers itself).
// Then kills what is left in the workers' groups and waits (up to 2 s) until
// they are empty.
// world_check (multi-node jobs), asked about every quarter second while
// the workers run, returns why the job's world changed (or ""); the group
// is then stopped the same way and the reason lands in world_changed.
Outcome supervise(std::vector<Worker>& ws, double grace_s,
                  const std::function<std::string()>& world_check = {});

}  // namespace muster::cli
