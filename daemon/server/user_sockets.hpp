// A listening socket of each user's own beside the shared one: DIR/users/
// <uid>.sock, owned by that uid, mode 0600, bound on the same ROUTER.
//
// Why: the kernel keeps one backlog per listening socket. A user who
// connects in a tight loop keeps the shared socket's backlog full, and
// every other user's new connection waits for a free place in it (a connect
// that finds it full fails with EAGAIN, and libzmq tries again later): 35
// to 150 ms at p99 with libmuster's 10 ms retry, seconds with libzmq's
// default (issue 43). A user's own socket has a backlog only they and root
// can fill. libmuster connects to it when it exists (common/endpoint.cpp:
// personal_endpoint); the first connection of a user since the socket was
// made still goes through the shared one.
//
// A user gets one once a connection of theirs passed the handshake on the
// shared socket (so only users who may reach the daemon at all), made at
// the round's end; the members of the socket's group (--socket-group), the
// owners of the jobs restored and the daemon's own user get theirs at start, so that even their
// first contact does not wait behind a flood; at most kMaxUserSockets of them, and a sixteenth of
// the fd limit (each is one fd). The names outlive the daemon: a restarted one binds again every
// name it finds, so that clients who reconnect find their socket (users/ holds only what the daemon
// put there: it is the daemon's, mode 0711).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <zmq.hpp>

namespace muster::daemon {

class UserSockets {
 public:
  static constexpr size_t kMaxUserSockets = 256;

  // dir: the runtime directory; the sockets go in dir/users. Binds again
  // the sockets a previous daemon left there. fd_limit: RLIMIT_NOFILE.
  UserSockets(zmq::socket_t& router, std::string dir, uint64_t fd_limit);

  // uid connected through the shared socket: it gets a socket at the next
  // bind_wanted(). Cheap; called from the handshake.
  void want(int64_t uid);
  // The members the group database lists for gid (not those whose primary
  // group it is: that would mean reading every user, from LDAP perhaps).
  void want_group(int64_t gid);
  // Binds the sockets wanted since the last call (not while the fd guard
  // holds new connections back: each costs an fd).
  void bind_wanted(bool paused);

  const std::string& dir() const { return dir_; }
  size_t bound() const { return bound_.size(); }

 private:
  bool bind(uid_t uid);
  // At the cap (said once in the log).
  bool full();

  zmq::socket_t& router_;
  std::string dir_;
  size_t cap_;
  std::set<uid_t> bound_, wanted_;
  bool full_logged_ = false;
};

}  // namespace muster::daemon
