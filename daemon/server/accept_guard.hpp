// The backstop behind the fd guard (fd_guard.hpp): libzmq 4.3's ipc
// listener aborts the process when accept() fails with EMFILE
// (src/ipc_listener.cpp's errno_assert), and its TCP listener spins on
// one. The guard pauses the listeners before the limit, but it runs on the
// daemon's loop while libzmq's I/O thread accepts on its own: a loop
// starved of CPU (2 busy cores, a sanitizer) has let the I/O thread reach
// the limit first, and the daemon died of a flood of connections.
//
// So the daemon's executable defines accept() and accept4(), which libzmq
// calls through the PLT: they are the system calls, except that once armed
// an EMFILE is never returned. A spare fd, held for this, is closed; the
// connection at the head of the backlog is accepted and closed at once (its
// client sees the connection end and reconnects later, as from a paused
// listener); the spare is opened again; and ECONNABORTED is returned, an
// error libzmq's listeners take as "nothing to accept now". The metrics
// endpoint's libmicrohttpd accepts through them too, and takes that error
// as a connection its client gave up.
#pragma once

#include <cstdint>

namespace muster::daemon {

// Opens the spare fd: from now on accept() sheds connections instead of
// failing with EMFILE. Call before the listeners bind.
void arm_accept_guard();
// Connections closed at once for want of an fd, since the start.
uint64_t accept_guard_shed();

}  // namespace muster::daemon
