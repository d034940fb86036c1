// Starting and supervising worker processes. Workers are forked held (they
// wait on a pipe) so the daemon knows their pids before they run; each gets
// its own process group, dies with muster run (PR_SET_PDEATHSIG), and
// muster run is a subreaper so grandchildren cannot escape either.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace muster::cli {

struct Worker {
  uint32_t rank = 0;
  pid_t pid = -1;
  int go_fd = -1;  // write end of the pipe the held child waits on
  bool done = false;
  int exit_code = 0;  // 128+signal when killed by a signal
};

// Blocks the signals supervise() waits for; call before any thread starts.
void block_supervisor_signals();

// Forks a child that waits for release() and then execs argv with env.
Worker spawn_held(uint32_t rank, const std::vector<std::string>& argv,
                  const std::vector<std::string>& env);
void release(Worker& w);
// Kills every worker's process group at once.
void kill_all(std::vector<Worker>& ws, int sig);

// Waits for all workers. The first failure stops the rest (SIGTERM, then
// SIGKILL after grace_s); SIGINT/SIGTERM/SIGHUP are forwarded the same way.
// Returns muster run's exit code.
int supervise(std::vector<Worker>& ws, double grace_s);

}  // namespace muster::cli
