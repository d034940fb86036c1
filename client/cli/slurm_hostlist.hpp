// Slurm's hostlist syntax (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST), as
// `scontrol show hostnames` expands it.
#pragma once

#include <string>
#include <vector>

namespace muster::cli {

// The host names of a Slurm hostlist, in order: `gpu[01-04,07],login1` is
// gpu01 gpu02 gpu03 gpu04 gpu07 login1. A range keeps the zero padding of
// its lower bound (`[08-10]`: 08 09 10); several bracket groups in one name
// multiply (`a[1-2]b[3-4]`: a1b3 a1b4 a2b3 a2b4). Throws
// std::invalid_argument with a sentence on a bad list (unbalanced or nested
// brackets, a range that runs backwards, an empty name) and on one that
// would expand to more than kMaxHosts names.
std::vector<std::string> expand_hostlist(const std::string& list);

inline constexpr size_t kMaxHosts = 65536;

}  // namespace muster::cli
