// Where a daemon listens and where a client looks (doc/design.md, section 2;
// doc/operating.md, "Where the daemon listens").
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

// The caller's own socket beside ipc://DIR/musterd.sock: ipc://DIR/users/
// <euid>.sock, when the daemon made it (a socket there owned by the
// caller's euid), else endpoint itself. Its backlog is the caller's alone:
// another user's connect flood does not hold the caller's connects back
// (daemon/server/user_sockets.hpp).
std::string personal_endpoint(const std::string& endpoint);

}  // namespace muster
