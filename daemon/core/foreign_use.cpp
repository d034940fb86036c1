// Foreign use of a GPU: a compute process on it that muster did not start.
// A process is muster's when it or an ancestor is a rank of one of this
// daemon's jobs (DataLoader workers, a rank's helpers), or when it is in the
// cgroup of one of this daemon's jobs; anything else on a free GPU would
// share it with whatever a rank leased there.
#include "core/job_table.hpp"
#include "log.hpp"

namespace muster::daemon {

std::string JobTable::foreign_user(uint32_t index) const {
  if (!gpu_use_.pids) return "";
  for (int64_t pid : gpu_use_.pids(index)) {
    // A setsid/double-forked helper and a previous generation's exiting
    // ranks are no longer descendants of a live slot, but the job's cgroup
    // keeps them: a process cannot leave it on its own.
    bool ours = false;
    if (gpu_use_.job_of) {
      std::string job = gpu_use_.job_of(pid);
      ours = !job.empty() && jobs_.count(job) > 0;
    }
    // Bounded: a pid's ancestry is short, and /proc can change under us.
    for (int64_t p = pid, depth = 0; p > 1 && depth < 64 && !ours; ++depth) {
      for (const auto& [id, job] : jobs_)
        for (const auto& slot : job.slots)
          if (slot.pid == p && slot_live(slot.state)) ours = true;
      p = gpu_use_.parent ? gpu_use_.parent(p) : 0;
    }
    if (!ours) return "pid " + std::to_string(pid) + ", which muster did not start";
  }
  return "";
}

std::function<std::string(uint32_t)> JobTable::foreign_test() const {
  if (!gpu_use_.pids) return {};
  return [this](uint32_t index) -> std::string {
    std::string f = foreign_user(index);
    if (f.empty() || gpu_use_.refuse) return f;
    log::warning(log::gpu(index), "GPU " + std::to_string(index) + " runs " + f +
                                      "; leased anyway (--foreign-gpu-use warn)");
    return "";
  };
}

}  // namespace muster::daemon
