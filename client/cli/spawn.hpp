// Starting worker processes held: each is forked waiting on a pipe, so the
// daemon knows its pid before it runs. Each gets its own process group and
// dies with muster run (PR_SET_PDEATHSIG); the guardian knows its group.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/numa.hpp"

namespace muster::cli {

// Raises muster run's own soft fd limit to the hard one (the store relay
// holds two fds a connection, a thousand-rank job's worth); workers started
// after it get the limit muster run was given, as under torchrun.
void raise_fd_limit();

struct Worker {
  uint32_t rank = 0;
  pid_t pid = -1;
  int go_fd = -1;   // write end of the pipe the held child waits on
  int out_fd = -1;  // read ends of the worker's stdout/stderr pipes (-1: not captured)
  int err_fd = -1;
  bool done = false;
  int exit_code = 0;  // 128+signal when killed by a signal
};

// Forks a child that waits for release() and then execs argv with env. With
// capture, its stdout and stderr are pipes read through an OutputPump. The
// child applies pin (its CPUs and memory node) once released, just before
// exec.
Worker spawn_held(uint32_t rank, const std::vector<std::string>& argv,
                  const std::vector<std::string>& env, bool capture, const PinMasks& pin = {});
void release(Worker& w);
// Kills every worker's process group at once.
void kill_all(std::vector<Worker>& ws, int sig);

}  // namespace muster::cli
