// Connections per local uid and per peer address, capped, so that one user
// or one host cannot take the file descriptors every other client needs
// (the fd guard, fd_guard.hpp, only keeps the daemon as a whole below its
// ceiling). Counted from the listeners' monitor events (ACCEPTED and
// DISCONNECTED carry the connection's fd; the kernel says whose it is:
// SO_PEERCRED for the local socket, getpeername for TCP) and enforced from
// accept on: a connection over its uid's or address's cap has kGrace to be
// refused by the ZAP handler (peer/zap_handler.hpp) in its handshake, which
// tells a libmuster client why (quota_exceeded naming the setting); one
// that has not started its handshake by then is shut down (shutdown(2)),
// not left holding its fd for the handshake limit. The connection being admitted is already
// counted: a cap of N admits N. Local connections that have sent nothing yet (in their handshake,
// or silent) are bounded in total (max_silent): past it the oldest is shut. Refusals are logged
// once per interval, counted.
//
// Plain TCP peers (peer_plain) have no handshake to authenticate them: one
// counts as a peer once it sent a valid peer request, and one that sent
// none within auth_within is closed (shutdown(2) on its fd: libzmq's I/O
// thread sees the end and closes it as it would any lost connection; the
// fd stays libzmq's). CURVE peers are authenticated by their handshake,
// which ZMQ_HANDSHAKE_IVL bounds.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

namespace muster::daemon {

class ConnCaps {
 public:
  using Clock = std::chrono::steady_clock;
  // 0 = no cap.
  // max_silent: local connections that sent nothing yet, of all uids.
  ConnCaps(uint64_t per_uid, uint64_t per_address, std::chrono::milliseconds auth_within,
           uint64_t max_silent = kMaxSilent)
      : per_uid_(per_uid),
        per_address_(per_address),
        auth_within_(auth_within),
        max_silent_(max_silent) {}
  static constexpr uint64_t kMaxSilent = 1024;
  // How long a connection over a cap may take to be refused in its
  // handshake before it is shut.
  static constexpr std::chrono::milliseconds kGrace{250};

  void local_accepted(int fd);
  void local_closed(int fd);
  // needs_auth: a plain TCP peer, closed unless it sends a valid request.
  void peer_accepted(int fd, bool needs_auth);
  void peer_closed(int fd);
  // A valid peer request came on fd: its connection is a peer's.
  void peer_authenticated(int fd) { unauthenticated_.erase(fd); }
  // A local connection sent its first frame: no longer silent.
  void local_spoke(int fd) {
    if (!silent_.empty()) silent_.erase(fd);
  }
  // Connections shut at accept so far (over a cap, or the oldest silent).
  uint64_t refused() const { return refused_; }

  // "" to admit, else why not (names the setting).
  std::string admit_local(int64_t uid) const;
  std::string admit_peer(const std::string& address) const;

  // Shuts the connections over a cap whose grace ended, and closes the
  // plain TCP connections that sent no valid request in time; returns how
  // many of the latter.
  size_t sweep(Clock::time_point now);
  // When the next one is due to be closed, if any waits.
  std::optional<Clock::time_point> next_sweep() const;

  uint64_t local_of(int64_t uid) const;
  uint64_t peers_of(const std::string& address) const;

 private:
  struct Unauthenticated {
    Clock::time_point since;
    std::string address;
  };
  struct Silent {
    Clock::time_point since;
    int64_t uid;
    int64_t pid;
  };
  struct Doomed {
    Clock::time_point deadline;
    int64_t uid;  // local: whose, to tell a reused fd
    int64_t pid;
    std::string address;  // peer: from where ("" = local)
    std::string why;
  };
  void sweep_doomed(Clock::time_point now);
  std::unordered_map<int, Doomed> doomed_;
  // Shuts fd down now; counted, and said once per interval.
  void refuse(int fd, const std::string& why);
  // Counts those closed at accept (accept_guard.hpp) since the last sweep,
  // and says them once per interval with the others.
  void count_closed_at_accept();
  void say_refusals();
  uint64_t closed_at_accept_ = 0;
  // Past max_silent_: the oldest silent local connection is shut.
  void bound_silent();
  uint64_t per_uid_, per_address_;
  std::chrono::milliseconds auth_within_;
  uint64_t max_silent_;
  std::unordered_map<int, Silent> silent_;
  uint64_t refused_ = 0;
  uint64_t refused_unlogged_ = 0;
  std::string last_refusal_;
  Clock::time_point refusal_logged_{};
  std::unordered_map<int, int64_t> uid_of_fd_;
  std::unordered_map<int64_t, uint64_t> per_uid_open_;
  std::unordered_map<int, std::string> address_of_fd_;
  std::map<std::string, uint64_t> per_address_open_;
  std::unordered_map<int, Unauthenticated> unauthenticated_;
};

// The numeric address of a TCP connection's peer, as libzmq writes it in a
// ZAP request ("127.0.0.1", "::1"); "" when the fd has none.
std::string tcp_peer_address(int fd);

}  // namespace muster::daemon
