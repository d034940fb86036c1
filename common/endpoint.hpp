// Where a daemon listens and where a client looks (DESIGN.md, "Contracts").
#pragma once

#include <string>

namespace muster {

// /run/muster for root, else $XDG_RUNTIME_DIR/muster, else /tmp/muster-$UID.
std::string default_runtime_dir();

std::string endpoint_for_dir(const std::string& runtime_dir);

// MUSTER_ENDPOINT, else MUSTER_RUNTIME_DIR's socket, else the default's (for
// a user without a daemon of their own: the system daemon's, if it runs).
std::string resolve_endpoint();

// The directory of an ipc:// endpoint, or "" for other transports.
std::string ipc_dir_of(const std::string& endpoint);

}  // namespace muster
