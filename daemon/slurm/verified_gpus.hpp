// slurm-gpus = verified: Slurm, not the client, says which GPUs a job may
// lease. A process's Slurm job comes from the kernel (common/slurm/step.hpp:
// its cgroup, else a root slurmstepd among its ancestors); the job's GPUs
// from the file muster's prolog hook wrote for it (common/slurm/
// allocation.hpp) in the daemon's Slurm directory, which must be root's
// and writable by no one else, as must each file. Without the setting
// (slurm-gpus = client, the default) none of this runs: a client's device
// list or Slurm environment may then only narrow what it is given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "slurm/step.hpp"

namespace muster::daemon {

class VerifiedGpus {
 public:
  // Makes dir when missing (0755), then opens and checks it; throws
  // Error(kPermissionDenied) when it is a link, another user's, or
  // writable by others.
  VerifiedGpus(std::string dir, slurm::Proc proc = {});
  ~VerifiedGpus();
  VerifiedGpus(const VerifiedGpus&) = delete;
  VerifiedGpus& operator=(const VerifiedGpus&) = delete;

  // The GPUs process `pid` may lease for a job of `owner` (a uid; -1 none):
  // its Slurm job's allocation on this node. Throws Error (permission_denied
  // or no_device) with a sentence when the process is in no Slurm job, the
  // job has no recorded allocation, or the allocation is another uid's.
  std::vector<int64_t> allowed(int64_t pid, int64_t owner) const;

 private:
  std::string dir_;
  int dir_fd_ = -1;
  slurm::Proc proc_;
};

}  // namespace muster::daemon
