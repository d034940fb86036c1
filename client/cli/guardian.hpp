// The guardian: a process of its own (double-forked, so not a child of
// muster run, in a session of its own, every signal but SIGKILL blocked)
// that notices when muster run is gone, even SIGKILLed, and then kills
// every worker's process group, every orphan muster run adopted (with its
// descendants), and every process that carries the job's MUSTER_RUN_GUARD
// token in its environment. It is the containment where the daemon gives a
// job no cgroup (daemon/contain/), and a second line where it does.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace muster::cli::guardian {

// Starts the guardian (once; later calls do nothing). Call before muster run
// becomes a subreaper: the guardian must not be its child.
void start();
// The guardian's pid (-1 when none could be started); workers find it, and
// the guardian's token, in MUSTER_RUN_GUARD=PID-TOKEN.
pid_t pid();
// Appends the guard token to env's MUSTER_RUN_GUARD (a comma-separated list:
// an inner muster run adds its own), so that it travels with a worker and
// whatever the worker starts.
void add_token(std::vector<std::string>& env);
// Tells the guardian about a worker's process group, and that an empty one
// needs no guarding any more (its id may be reused).
void watch_group(pid_t pgid);
void forget_group(pid_t pgid);
// Tells the guardian about muster run's children that are not `workers`:
// muster run is a subreaper, so an orphan a worker leaves behind (a double
// fork, `setsid -f`, with or without its environment) becomes its child;
// the guardian ends it, and what descends from it, with the job. Call
// every few hundred ms while the workers run; each is told once.
void adopt_orphans(const std::vector<pid_t>& workers);
// A child of muster run that may outlive it (the embedded daemon).
void exempt(pid_t pid);

}  // namespace muster::cli::guardian
