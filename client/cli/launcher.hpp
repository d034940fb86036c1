// Starting and supervising worker processes. Workers are forked held (they
// wait on a pipe) so the daemon knows their pids before they run; each gets
// its own process group, dies with muster run (PR_SET_PDEATHSIG), and
// muster run is a subreaper so grandchildren cannot escape either. A
// guardian process (not a child of muster run) notices when muster run is
// gone, even SIGKILLed, and kills every worker's group and every process
// that carries the job's MUSTER_RUN_GUARD token in its environment.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace muster::cli {

struct Worker {
  uint32_t rank = 0;
  pid_t pid = -1;
  int go_fd = -1;   // write end of the pipe the held child waits on
  int out_fd = -1;  // read ends of the worker's stdout/stderr pipes (-1: not captured)
  int err_fd = -1;
  bool done = false;
  int exit_code = 0;  // 128+signal when killed by a signal
};

// Blocks the signals supervise() waits for and starts the guardian; call
// once, before any thread starts. At exit muster run closes its end of the
// guardian's pipe and waits (up to 2 s) until the guardian is gone.
void block_supervisor_signals();
// The guardian's pid (-1 when none could be started); workers find it, and
// the guardian's token, in MUSTER_RUN_GUARD=PID-TOKEN.
pid_t guardian_pid();
// Takes a pending SIGINT/SIGTERM/SIGHUP off the queue; 0 when none waits.
int take_pending_stop_signal();

// Forks a child that waits for release() and then execs argv with env. With
// capture, its stdout and stderr are pipes read through an OutputPump.
Worker spawn_held(uint32_t rank, const std::vector<std::string>& argv,
                  const std::vector<std::string>& env, bool capture);
void release(Worker& w);
// Kills every worker's process group at once.
void kill_all(std::vector<Worker>& ws, int sig);

// Copies the workers' captured output to muster run's stdout and stderr on
// a thread of its own, whole lines at a time, each prefixed `[rankN]: `
// when prefix is set, and keeps the last lines of each rank's stderr.
class OutputPump {
 public:
  OutputPump(bool prefix, size_t tail_lines);
  ~OutputPump();
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;
  // Takes over w.out_fd and w.err_fd; call before start().
  void add(Worker& w);
  void start();
  // Reads on until every pipe is at EOF or drain_s has passed, writes out
  // unfinished lines and stops the thread.
  void finish(double drain_s);
  // The last lines rank wrote to stderr (after finish()).
  std::deque<std::string> tail(uint32_t rank) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

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
// Then kills what is left in the workers' groups and waits (up to 2 s) until
// they are empty.
// world_check (multi-node jobs), asked about every quarter second while
// the workers run, returns why the job's world changed (or ""); the group
// is then stopped the same way and the reason lands in world_changed.
Outcome supervise(std::vector<Worker>& ws, double grace_s,
                  const std::function<std::string()>& world_check = {});

}  // namespace muster::cli
