// What Slurm allocated to a job on this node, as muster's prolog hook
// (`muster slurm-hook prolog`, run by slurmd as root) records it: one file a
// job in musterd's Slurm directory, named by the job id, "uid=U\ngpus=0,2\n".
// The hook learns it from the variables slurmd sets for a prolog
// (SLURM_JOB_ID, SLURM_JOB_UID, SLURM_JOB_GPUS); the epilog removes it.
// With slurm-gpus = verified, musterd leases a GPU only to a process of a
// Slurm job (slurm/step.hpp) whose file names that GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace muster::slurm {

struct Allocation {
  int64_t uid = -1;
  std::vector<int64_t> gpus;  // as SLURM_JOB_GPUS numbers them (NVML's order)
  bool operator==(const Allocation&) const = default;
};

std::string allocation_text(const Allocation& a);
// nullopt when the text is not one allocation_text() wrote.
std::optional<Allocation> parse_allocation(const std::string& text);
// A GPU list as Slurm writes it ("0,2", "" = none); nullopt when malformed.
std::optional<std::vector<int64_t>> parse_gpu_list(const std::string& list);

}  // namespace muster::slurm
