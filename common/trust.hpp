// Whom a client trusts with its requests (issue #13): the daemon behind an
// ipc:// socket must run as the caller's uid or as root, and the socket's
// directory must be one that nobody else could have planted or may change.
// Without these checks another user could create /tmp/muster-$UID first, run
// a daemon there, and read everything the victim's jobs send it (store
// values, NCCL ids). The daemon's side of the bargain (it refuses a runtime
// directory it does not own) is daemon/server/runtime_dir.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace muster::trust {

// Whether a daemon run by uid may serve this process: its own uid, or root.
bool trusted_uid(int64_t uid);

// Refuses (Error kPermissionDenied) the directory of an ipc socket unless it
// is owned by the caller or by root and neither group- nor world-writable:
// the rule the daemon applies to its own runtime directory (a writer could
// swap the socket), with root accepted as the owner so that the system
// service's /run/muster (root:muster 0755 or 0750) passes. No exception for
// a sticky bit: in a sticky world-writable directory anyone may still
// create musterd.sock before the daemon does. A directory that does not
// exist yet is made now, ours and private (0700), so that nobody else can
// make it and listen there before our daemon does (where we may not make it,
// neither may anyone but its owner).
void check_socket_dir(const std::string& dir);

// Refuses the daemon listening on the unix socket at path (a file, or an
// abstract name starting with '@' as in ZeroMQ) unless trusted_uid() holds
// for it: connects a plain stream socket, reads SO_PEERCRED and closes it,
// before anything is sent. When nobody listens at a socket file (none yet,
// a stale one) it passes: in a directory check_socket_dir() accepted only
// our daemon or root's can bind it later, and the reply check covers the
// rest. Nobody listening at an abstract name is kUnavailable: anyone could
// bind it later. When the connection fails otherwise (no permission, a full
// backlog) the socket file's owner stands in for the daemon's uid.
void check_daemon(const std::string& path);

// Refuses a reply that libzmq says came from uid (trusted_uid() false).
void check_reply_uid(int64_t uid, const std::string& endpoint);

// libzmq's "Peer-Address" property of a frame from an ipc:// peer,
// "ADDR:UID:GID:PID" (daemon/server/server.cpp's peer_credentials). False
// when prop is not of that form.
bool parse_peer_address(std::string_view prop, int64_t& uid, int64_t& gid, int64_t& pid);

}  // namespace muster::trust
