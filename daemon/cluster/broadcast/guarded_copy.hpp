// Copies to or from a mapping of a file that another process controls (a
// rank's broadcast pool, cluster/broadcast/pool_files.hpp). The pool is sealed
// against shrinking, so no page of the mapping is ever past the file's
// end; but a page the kernel cannot supply (the rank punched a hole and
// memory is short when the daemon touches it again) still raises SIGBUS.
// Caught here, on the copying thread only, it fails the copy, not the
// daemon. A SIGBUS anywhere else goes to the handler there was before.
#pragma once

#include <cstddef>

namespace muster::daemon {

// memcpy(dst, src, n), its stores bypassing the cache (the bytes are for
// other processes); false when a page of either raised SIGBUS (then dst
// holds part of the bytes).
bool guarded_copy(void* dst, const void* src, size_t n);

}  // namespace muster::daemon
