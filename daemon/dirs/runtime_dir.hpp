// The daemon's runtime directory (musterd.sock, musterd.lock, by default
// state.msgpack), made and checked before anything is put there. A
// directory that another user made or may write is refused (issue #13):
// whoever created /tmp/muster-$UID first could otherwise read the state
// file (the store's values) or swap the socket. The client's side is
// common/trust.hpp.
#pragma once

#include <string>

namespace muster::daemon {

// Creates dir and its missing parents (an XDG dir may lack its muster/
// child): parents 0755, dir itself 0700, or 0755 for root, whose
// /run/muster the socket group's members must enter. Then throws Error
// kPermissionDenied, naming the path, the owner and the mode found, unless
// dir is a real directory (not a symbolic link), owned by this process's
// euid, and writable by neither its group nor others. A non-root daemon's
// directory is then made private to it (0700), as before. option is the
// flag that picks another directory ("--runtime-dir", "--state-dir"), for
// the sentence.
void prepare_runtime_dir(const std::string& dir, const std::string& option = "--runtime-dir");

// A directory the daemon writes, opened without following a link at its
// last component (O_DIRECTORY | O_NOFOLLOW), and checked through that
// descriptor: owned by this process's euid, writable by neither its group
// nor others. Returns the descriptor (the caller closes it; files are then
// made relative to it, with openat), or throws Error kPermissionDenied with
// a sentence that starts with what_prefix and the path and ends naming
// option, the flag that picks another directory.
int open_own_dir(const std::string& dir, const std::string& what_prefix, const std::string& option);

// open_own_dir, after making dir when it is missing: 0755, set explicitly
// (the unit's UMask=0077 would make it 0700), for directories that other
// users' programs read (dcgm-exporter's job mapping) or root's hook writes
// (the Slurm directory). Throws Error(kInternal) when it cannot be made.
int make_own_dir(const std::string& dir, const std::string& what_prefix, const std::string& option);

// This machine's host name: part of the daemon's node id among its peers,
// and the name they show for it unless --node-name says otherwise.
std::string host_name();

}  // namespace muster::daemon
