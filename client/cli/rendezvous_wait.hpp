// Waiting for a multi-node world without going deaf: the rendezvous runs
// on a thread of its own while muster run watches for Ctrl-C/SIGTERM (which
// end the wait at once) and says every few seconds which nodes joined and
// what it waits for.
#pragma once

#include <string>

#include "muster/launcher.hpp"

namespace muster::cli {

// muster::rendezvous through the daemon at endpoint. On SIGINT, SIGTERM or
// SIGHUP it says so and exits the process (128 + the signal): no worker has
// started, and the daemon forgets a launcher that is gone. name: "muster
// run" or "muster launch".
muster::World wait_for_world(const std::string& endpoint, const std::string& job,
                             const muster::RendezvousOptions& options, const char* name);

}  // namespace muster::cli
