// Containment of the jobs' processes on this node: a cgroup per job where a
// cgroup v2 hierarchy is writable, and what is left of a job on its end.
//
// The daemon owns the cgroups, not the launcher: it outlives a SIGKILLed
// `muster run` (which a launcher-owned cgroup would not), it is the one
// process that may write the hierarchy (root, or a systemd unit with
// Delegate=yes), and it already learns of a job's end from its workers'
// pidfds. It does no I/O in core/: this class follows the job table from
// outside, once a round, before the round's replies leave. So a worker
// that muster run holds until Attach is answered is in its cgroup before
// it execs, and everything it starts is born there.
//
// Where no hierarchy is writable (an ordinary user's embedded daemon), or
// with --containment guardian, jobs rely on muster run's guardian (a
// process that kills the workers' groups and everything carrying the job's
// token in its environment when muster run dies); `muster status` and the
// log say which is in use.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "jobs/job.hpp"
#include "liveness/pidwatch.hpp"

namespace muster::daemon::contain {

class JobCgroups {
 public:
  // mode: "auto" (a cgroup per job when possible) or "guardian" (never).
  // The cgroups live in <own cgroup>/musterd-<hash of runtime_dir>, so
  // daemons of one machine never share one and a restarted daemon finds
  // its own again.
  JobCgroups(const std::string& mode, const std::string& runtime_dir, PidWatch& watch);
  ~JobCgroups();
  JobCgroups(const JobCgroups&) = delete;
  JobCgroups& operator=(const JobCgroups&) = delete;

  // What `muster status` shows: "cgroup DIR" or "guardian (WHY)".
  const std::string& description() const { return description_; }
  bool uses_cgroups() const { return !base_.empty(); }

  // Brings the cgroups in line with the jobs: a newly attached worker is
  // moved into its job's cgroup; a job that ended (or was reserved anew)
  // has its cgroup killed and removed and its orphaned /dev/shm segments
  // removed. The first call adopts the cgroups a previous daemon left.
  void sync(const std::map<std::string, Job>& jobs);
  // A watched pid ended: when it is a job's launcher, the job's cgroup is
  // killed now (a launcher never dies with its workers left running).
  void pid_exited(int64_t pid);
  // Killed cgroups whose processes are still leaving; retry() removes them.
  bool removals_pending() const { return !removals_.empty(); }
  void retry_removals();
  // The id of the job whose cgroup (or one below it) holds pid, "" if none:
  // what the foreign-use test asks of a process that is no rank's
  // descendant (a setsid/double-forked helper, an exiting old rank).
  std::string job_of(int64_t pid) const;

 private:
  struct Record {
    std::string dir;           // the job's cgroup; empty until its first worker
    std::set<int64_t> placed;  // worker pids seen (and moved in, with cgroups)
    int64_t launcher = 0;      // watched while the job runs (cgroups only)
    int64_t owner = -1;        // the job's owner: whose /dev/shm orphans go at its end
  };
  void adopt(const std::map<std::string, Job>& jobs);
  void place(const std::string& id, const Job& job, Record& r);
  void end(const std::string& id, Record& r);
  void kill(const std::string& dir, const std::string& why);
  // Our cgroup goes when no job's is left in it (made again for the next).
  void remove_base_when_idle();

  PidWatch& watch_;
  std::string base_;  // our cgroup; empty: the guardian only
  std::string description_;
  std::map<std::string, Record> records_;
  struct Removal {
    std::string dir;
    Clock::time_point since;
  };
  std::vector<Removal> removals_;
  bool adopted_ = false;
};

}  // namespace muster::daemon::contain
