// Which Slurm job step a process belongs to, as the kernel says -- never as
// its environment says (SLURM_JOB_ID and the like are the process's own to
// set). Two ways, as Slurm's proctrack plugins keep their steps:
//  - proctrack/cgroup: the process's cgroup (/proc/PID/cgroup) lies below a
//    step's: "/slurm/uid_U/job_J/step_S/..." (cgroup v1) or
//    "/system.slice/slurmstepd.scope/job_J/step_S/..." (v2). Only root can
//    make directories there; a path that merely contains those names
//    somewhere lower (a user's delegated systemd subtree) does not count.
//  - proctrack/linuxproc (and any other): an ancestor of the process is a
//    slurmstepd -- its executable named slurmstepd (or slurmstepd-wlm, as
//    Debian installs it), every uid of it root,
//    its command line "slurmstepd: [J.S]" as slurmstepd writes it.
// Used by musterd (slurm-gpus = verified) and by muster run --slurm-task.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace muster::slurm {

struct Step {
  uint64_t job = 0;
  std::string step;  // "0", "1", "batch", "extern", ...
  // The slurmstepd found above the process (0: found through its cgroup):
  // one per node and step, so the tasks of one node share it, where
  // several slurmd run on one host too.
  int64_t stepd = 0;
  bool operator==(const Step&) const = default;
  std::string text() const { return std::to_string(job) + "." + step; }
};

// Where /proc is: "/proc", or a directory laid out alike (the tests' fake
// /proc: PID/cgroup, PID/status, PID/cmdline, PID/exe as a link).
struct Proc {
  std::string root = "/proc";
};

// The step named by a /proc/PID/cgroup text (any of its lines), per the
// rules above; nullopt when no line lies below a step's cgroup.
std::optional<Step> step_from_cgroup(const std::string& cgroup_text);

// "slurmstepd: [J.S]" -> J.S; nullopt for any other command line.
std::optional<Step> step_from_stepd_cmdline(const std::string& cmdline);

// The step of process `pid` (its cgroup first, then its ancestors);
// nullopt when it belongs to none, or is gone.
std::optional<Step> step_of(int64_t pid, const Proc& proc = {});

}  // namespace muster::slurm
