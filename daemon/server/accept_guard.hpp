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
//
// The same accept() enforces the connection caps (conn_caps.hpp) where a
// connection begins: past its uid's cap (a local connection, by
// SO_PEERCRED) or its address's cap (the peer port) by more than kSlack,
// it is closed inside accept, before libzmq ever sees it, and holds no fd.
// A flood of connects by one user (36,000 a second here) then costs the
// daemon an accept and a close each, no monitor events and no paused
// listener: other users' connects kept a p99 of 1.7 s before. The first
// kSlack over the cap still go through to the handshake, where the ZAP
// handler refuses them with the sentence libmuster shows (quota_exceeded
// naming the setting), and ConnCaps shuts those that never handshake.
#pragma once

#include <cstdint>
#include <string>

namespace muster::daemon {

// Opens the spare fd: from now on accept() sheds connections instead of
// failing with EMFILE. Call before the listeners bind.
void arm_accept_guard();
// Connections closed at once for want of an fd, since the start.
uint64_t accept_guard_shed();

// Caps connections at accept (0 = no cap): per local uid, and per remote
// address on the TCP port `peer_port` (0: none yet; other TCP listeners,
// the metrics endpoint's, are not counted).
inline constexpr uint64_t kAcceptSlack = 16;
void cap_at_accept(uint64_t per_uid, uint64_t per_address);
void cap_peer_port(int peer_port);
// A counted connection's fd was closed (its monitor's DISCONNECTED).
void accept_caps_closed(int fd);
// Connections closed at accept over a cap, since the start, and why the
// last one was.
uint64_t accept_caps_refused();
std::string accept_caps_last_refusal();

}  // namespace muster::daemon
