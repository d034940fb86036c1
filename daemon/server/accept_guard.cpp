#include "server/accept_guard.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <string>
#include <unordered_map>

namespace muster::daemon {

namespace {

std::mutex g_mu;  // libzmq may accept on more than one I/O thread
int g_spare = -1;
std::atomic<bool> g_armed{false};
std::atomic<uint64_t> g_shed{0};

// The caps at accept, under g_mu: who each counted fd is ("u<uid>" or
// "a<address>") and how many each holds. A number accepted again whose
// DISCONNECTED was not read yet was closed: its old owner is forgotten
// first (a DISCONNECTED read later for it then forgets the new one; the
// count errs low, and ConnCaps' own count is the backstop).
struct Caps {
  uint64_t per_uid = 0, per_address = 0;
  int peer_port = 0;
  std::unordered_map<int, std::string> who;
  std::unordered_map<std::string, uint64_t> open;
  std::string last;
};
Caps g_caps;
std::atomic<bool> g_capped{false};
std::atomic<uint64_t> g_refused{0};

void forget_fd(int fd) {
  auto it = g_caps.who.find(fd);
  if (it == g_caps.who.end()) return;
  if (auto n = g_caps.open.find(it->second); n != g_caps.open.end() && --n->second == 0)
    g_caps.open.erase(n);
  g_caps.who.erase(it);
}

// Whose the accepted connection s is, and its cap; "" when it is not
// counted (a TCP listener other than the peer port's).
std::string owner_of(int listener, int s, uint64_t* cap) {
  sockaddr_storage here{};
  socklen_t len = sizeof here;
  if (::getsockname(listener, reinterpret_cast<sockaddr*>(&here), &len) != 0) return "";
  if (here.ss_family == AF_UNIX) {
    ucred cred{};
    socklen_t clen = sizeof cred;
    if (::getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0) return "";
    *cap = g_caps.per_uid;
    return "u" + std::to_string(cred.uid);
  }
  if (here.ss_family != AF_INET && here.ss_family != AF_INET6) return "";
  const int port =
      ntohs(here.ss_family == AF_INET ? reinterpret_cast<sockaddr_in&>(here).sin_port
                                      : reinterpret_cast<sockaddr_in6&>(here).sin6_port);
  if (g_caps.peer_port == 0 || port != g_caps.peer_port) return "";
  sockaddr_storage there{};
  len = sizeof there;
  char host[NI_MAXHOST] = {};
  if (::getpeername(s, reinterpret_cast<sockaddr*>(&there), &len) != 0 ||
      ::getnameinfo(reinterpret_cast<sockaddr*>(&there), len, host, sizeof host, nullptr, 0,
                    NI_NUMERICHOST) != 0)
    return "";
  *cap = g_caps.per_address;
  return std::string("a") + host;
}

// s, just accepted on listener: kept and counted, or closed (false).
bool admit(int listener, int s) {
  std::lock_guard lock(g_mu);
  forget_fd(s);
  uint64_t cap = 0;
  std::string who = owner_of(listener, s, &cap);
  if (who.empty()) return true;
  uint64_t& n = g_caps.open[who];
  if (cap && n >= cap + kAcceptSlack) {
    if (n == 0) g_caps.open.erase(who);
    ::close(s);
    g_refused.fetch_add(1, std::memory_order_relaxed);
    g_caps.last = (who[0] == 'u' ? "of uid " : "from ") + who.substr(1) + ", " + std::to_string(n) +
                  " open, over its cap of " + std::to_string(cap) +
                  (who[0] == 'u' ? " (max-connections-per-uid)" : " (max-connections-per-peer)");
    return false;
  }
  ++n;
  g_caps.who[s] = std::move(who);
  return true;
}

int sys_accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return static_cast<int>(::syscall(SYS_accept4, fd, addr, len, flags));
}

// At the limit: give the spare's slot to the waiting connection, close it,
// take the slot back. Without a spare (the daemon's own thread took the
// freed slot first) the listener is told to try again later: libzmq polls
// again, and the fd guard's pause ends the spinning.
int shed(int fd) {
  std::lock_guard lock(g_mu);
  if (g_spare < 0) g_spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (g_spare >= 0) {
    ::close(g_spare);
    int s = sys_accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (s >= 0) {
      ::close(s);
      g_shed.fetch_add(1, std::memory_order_relaxed);
    }
    g_spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  errno = ECONNABORTED;
  return -1;
}

// A connection closed over its cap is followed by the next in the backlog
// at once, up to kDrain of them, rather than one per turn of libzmq's
// poller: a flood of connects (110,000 a second from one core here) fills
// the backlog faster than one accept per turn empties it, and everyone
// else's connect then fails with EAGAIN and waits out libzmq's reconnect
// interval. libzmq's listening socket may block: the next accept is made
// only while a poll says one waits (else the I/O thread would sleep in
// accept until the next connect, and every connection's traffic with it).
constexpr int kDrain = 4096;

int guarded_accept(int fd, sockaddr* addr, socklen_t* len, int flags) {
  const socklen_t given = len ? *len : 0;
  for (int closed = 0;; ++closed) {
    if (len) *len = given;
    if (closed > 0) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) != 1) {
        errno = ECONNABORTED;  // as a shed one: "nothing to accept now"
        return -1;
      }
    }
    int s = sys_accept4(fd, addr, len, flags);
    if (s >= 0) {
      if (!g_capped.load() || admit(fd, s)) return s;
      if (closed < kDrain) continue;
      errno = ECONNABORTED;  // as a shed one: "nothing to accept now"
      return -1;
    }
    if (closed > 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) errno = ECONNABORTED;
    if (errno != EMFILE || !g_armed.load()) return -1;
    return shed(fd);
  }
}

}  // namespace

void arm_accept_guard() {
  std::lock_guard lock(g_mu);
  if (g_spare < 0) g_spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  g_armed = true;
}

uint64_t accept_guard_shed() {
  return g_shed.load(std::memory_order_relaxed);
}

void cap_at_accept(uint64_t per_uid, uint64_t per_address) {
  std::lock_guard lock(g_mu);
  g_caps.per_uid = per_uid, g_caps.per_address = per_address;
  g_capped = per_uid != 0 || per_address != 0;
}

void cap_peer_port(int peer_port) {
  std::lock_guard lock(g_mu);
  g_caps.peer_port = peer_port;
}

void accept_caps_closed(int fd) {
  if (!g_capped.load()) return;
  std::lock_guard lock(g_mu);
  forget_fd(fd);
}

uint64_t accept_caps_refused() {
  return g_refused.load(std::memory_order_relaxed);
}

std::string accept_caps_last_refusal() {
  std::lock_guard lock(g_mu);
  return g_caps.last;
}

}  // namespace muster::daemon

// What libzmq's listeners call (see the header). Defined in the executable,
// they come before libc's in the dynamic linker's search.
extern "C" int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return muster::daemon::guarded_accept(fd, addr, len, flags);
}

extern "C" int accept(int fd, sockaddr* addr, socklen_t* len) {
  return muster::daemon::guarded_accept(fd, addr, len, 0);
}
