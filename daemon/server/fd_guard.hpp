// Keeps the daemon below its file-descriptor ceiling, so that libzmq never
// meets EMFILE: libzmq 4.3's ipc listener aborts the process on an accept
// that fails with it (src/ipc_listener.cpp's errno_assert), and its TCP
// listener spins on one. Each connection costs one fd, taken by libzmq's
// I/O thread before the daemon hears of it; the daemon counts them from
// the sockets' monitors (ZMQ_EVENT_ACCEPTED / DISCONNECTED) and, once the
// count plus its own fds reaches the limit less a reserve, stops accepting
// until connections end:
//   - the local listener: its socket file is renamed aside, so a connect()
//     by path fails (ENOENT) while every connection made stays served;
//     renamed back to resume. (zmq_unbind would close every connection the
//     listener accepted: they are its children in libzmq.)
//   - the peer listener: a socket filter that drops every packet (classic
//     BPF "ret 0") on the listening socket, so no TCP handshake completes
//     (clients retry their SYN) and established peers are untouched;
//     detached to resume.
// The reserve covers what can still arrive after the pause (each listener's
// backlog of connections the kernel completed, ZMQ_BACKLOG) and the fds the
// daemon opens itself between two counts (state files, pidfds of ranks,
// links to coordinators, libzmq mailboxes): see Server::bind. Where the
// pause still comes too late (a loop starved of CPU), accept_guard.hpp
// closes the connections past the limit instead of letting libzmq abort.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <zmq.hpp>

namespace muster::daemon {

// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit
// in force afterwards.
uint64_t raise_fd_limit();
// The daemon's ZeroMQ context, its socket limit (ZMQ_MAX_SOCKETS, libzmq's
// default 1,023) set to the fd limit raise_fd_limit() leaves: each socket
// takes an fd (its mailbox), and what bounds them is the fd budget and the
// caps on what makes sockets (peer links: NodeLinks), not a number that a
// user's jobs reach first (a socket past it threw where nothing caught it).
zmq::context_t make_daemon_context();
// Open fds of this process (/proc/self/fd); nullopt when it cannot tell
// (no fd left to read the directory with).
std::optional<uint64_t> count_open_fds();

class FdGuard {
 public:
  FdGuard(zmq::context_t& ctx, uint64_t limit, uint64_t reserve);

  // Monitors the peer ROUTER's connections; call before it binds.
  void monitor_peer(zmq::socket_t& peer);
  // The peer monitor's socket, for the loop to poll (null without peers).
  void* peer_events();
  // Reads the peer monitor; never blocks.
  void drain_peer();
  // Told of each peer connection accepted (true) or gone (false), with its
  // fd (the caps per address: conn_caps.hpp).
  void on_peer_event(std::function<void(bool accepted, int fd)> f) { on_peer_ = std::move(f); }
  // The local socket file (renamed aside while paused).
  void set_local_path(std::string path) { local_path_ = std::move(path); }
  // The users' own sockets' directory (user_sockets.hpp), set aside with
  // the local socket: users.full, mode 0.
  void set_users_dir(std::string path) { users_dir_ = std::move(path); }

  // Pauses or resumes the listeners for the connections open now (local:
  // counted by ClientConnections). Cheap unless near the ceiling.
  void check(uint64_t local_open);

  uint64_t limit() const { return limit_; }
  uint64_t ceiling() const { return limit_ > reserve_ ? limit_ - reserve_ : 0; }
  bool paused() const { return paused_; }

 private:
  void pause(uint64_t in_use);
  void resume(uint64_t in_use);
  void filter_peer(bool drop);
  void report_shed();

  std::optional<zmq::socket_t> peer_events_;
  zmq::context_t& ctx_;
  uint64_t limit_, reserve_;
  uint64_t peer_open_ = 0;
  int peer_listen_fd_ = -1;  // from ZMQ_EVENT_LISTENING
  // The fds that are not connections, as last counted.
  uint64_t base_ = 0;
  bool counted_ = false;
  std::chrono::steady_clock::time_point last_count_;
  bool paused_ = false;
  uint64_t shed_seen_ = 0;
  std::string local_path_, users_dir_;
  std::function<void(bool, int)> on_peer_;
};

}  // namespace muster::daemon
