#pragma once

#include "muster/status.hpp"

namespace muster::cli {

// Prints the GPUs of a status, one row each, a quarantined GPU's reason
// under its row.
void print_gpu_table(const DaemonStatus& s);

// `muster status --topology`: the matrix of nvidia-smi topo -m (NV# or the
// PCIe path per pair, each GPU's CPU and NUMA affinity, the legend), or one
// sentence when the daemon does not know the topology.
void print_topology(const DaemonStatus& s);

}  // namespace muster::cli
