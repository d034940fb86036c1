#pragma once

#include "muster/status.hpp"

namespace muster::cli {

// Prints the GPUs of a status, one row each, a quarantined GPU's reason
// under its row.
void print_gpu_table(const DaemonStatus& s);

}  // namespace muster::cli
