// The job's slots on this node's daemon: muster run's Reserve, with the
// retries a restart needs and --wait-for-gpus.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/embedded.hpp"
#include "cli/run_options.hpp"
#include "muster/launcher.hpp"

namespace muster::cli {

// Ctrl-C or SIGTERM while muster run waits for GPUs: no worker started.
struct StoppedWaiting : std::runtime_error {
  int sig;
  explicit StoppedWaiting(int s)
      : std::runtime_error(std::string("SIG") + sigabbrev_np(s) +
                           ": stopped waiting for GPUs; no worker was started"),
        sig(s) {}
};

// Reserves the job's slots (and GPUs, unless o.cpu) for this attempt. A
// restart's Reserve may meet the daemon still noting the old workers' exits
// (the job is still there, or its GPUs), and an embedded daemon left idle
// may have stopped: both get a few seconds. With --wait-for-gpus, GPUs
// leased to other jobs are waited for; StoppedWaiting on Ctrl-C or SIGTERM
// meanwhile.
muster::Reservation reserve_slots(const std::string& endpoint, const RunOptions& o,
                                  const EmbeddedPeering& peering, const std::string& job,
                                  uint32_t attempt, uint32_t generation,
                                  const std::vector<int>& devices);

}  // namespace muster::cli
