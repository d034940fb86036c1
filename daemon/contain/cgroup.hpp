// A thin wrapper over the cgroup v2 file system: the only place the daemon
// touches /sys/fs/cgroup. A cgroup is the one container a process cannot
// leave on its own: setsid, a double fork or a cleared environment all stay
// inside, so ending a cgroup ends everything a job started.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace muster::daemon::contain {

// This process's own cgroup v2 directory: the cgroup2 mount found in
// /proc/self/mountinfo (not always /sys/fs/cgroup: a hybrid layout mounts it
// at /sys/fs/cgroup/unified) joined with the "0::" line of
// /proc/self/cgroup. Empty, with why_not set, when there is none.
struct OwnCgroup {
  std::string dir;
  std::string why_not;
};
OwnCgroup own_cgroup();
// The same for any process (read from /proc/PID/cgroup): "" when it has
// none, is gone, or is outside the mount.
std::string cgroup_dir_of(pid_t pid);

// Each returns "" on success, else a sentence saying what failed.
// Makes dir (an existing one is fine).
std::string make(const std::string& dir);
// Moves pid into dir (its cgroup.procs). Its children from now on are born
// there too.
std::string move(const std::string& dir, pid_t pid);
// SIGKILLs everything in dir: cgroup.kill (Linux >= 5.14) ends every process
// at once, forks racing it included; older kernels get a kill loop over
// cgroup.procs.
std::string kill_all(const std::string& dir);

// Removes dir once it is empty: false while processes are still leaving
// (EBUSY), true when it is gone (or was never there).
bool remove(const std::string& dir);
// The names of dir's child cgroups.
std::vector<std::string> children(const std::string& dir);
// Whether no process is in dir or below it ("populated 0" in cgroup.events).
bool empty(const std::string& dir);
// Seconds since dir was made (or last changed); -1 when it is not there.
double age_s(const std::string& dir);

}  // namespace muster::daemon::contain
