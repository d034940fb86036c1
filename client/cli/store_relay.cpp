#include "cli/store_relay.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "cli/posix_io.hpp"

namespace muster::cli {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Per direction: beyond it the relay stops reading that side, so a peer
// that never reads costs at most this much (TCP's own windows do the rest).
constexpr size_t kBufferCap = size_t{1} << 20;
// Connections at once, fewer where the fd limit is lower (two fds each,
// and some kept for the launcher's own work); more wait in the listener's
// backlog until some end. torch has two connections a rank; the cap keeps
// a port scanner from taking the launcher's fds.
constexpr size_t kMaxLinks = size_t{1} << 16;
constexpr size_t kFdsKept = 64;
constexpr size_t kMinLinks = 16;
// How soon rank 0's store is tried again after a refusal: soon at first
// (rank 0 is about to listen), then less often. One connection probes;
// the others wait for it, so a thousand waiting workers cost one connect.
constexpr milliseconds kFirstRetry{2};
constexpr milliseconds kMaxRetry{50};
// Out of fds at accept: the listener is left alone this long (it would
// stay readable, and poll would spin).
constexpr milliseconds kAcceptPause{100};

void no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// MASTER_PORT on every interface, as torch's store listens: IPv6 with IPv4
// mapped, else IPv4 alone where the host has no IPv6.
int listen_any(int port) {
  int one = 1;
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int off = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(fd, SOMAXCONN) == 0)
      return fd;
    int err = errno;
    close(fd);
    if (err == EADDRINUSE) throw std::system_error(err, std::generic_category(), "bind");
  }
  fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "socket");
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, SOMAXCONN) != 0) {
    int err = errno;
    close(fd);
    throw std::system_error(err, std::generic_category(), "bind");
  }
  return fd;
}

// One worker's connection and, once rank 0 listens, its twin to the store.
struct Link {
  int down = -1;  // the worker's
  int up = -1;    // rank 0's store's; -1 until a connect is under way
  bool connecting = false;
  bool joined = false;  // up is connected
  std::string to_up, to_down;
  bool down_eof = false, up_eof = false;  // that side will send no more
  bool up_shut = false, down_shut = false;
  bool dead = false;
  int down_slot = -1, up_slot = -1;  // their entries in this round's pollfds

  ~Link() {
    close_fd(down);
    close_fd(up);
  }
};

// Reads what `fd` has into `buf`, up to the cap. False on an error (a
// reset): the link is over.
bool drain(int fd, std::string& buf, bool& eof) {
  char chunk[65536];
  while (!eof && buf.size() < kBufferCap) {
    ssize_t n = read(fd, chunk, std::min(sizeof chunk, kBufferCap - buf.size()));
    if (n > 0) {
      buf.append(chunk, static_cast<size_t>(n));
    } else if (n == 0) {
      eof = true;
    } else if (errno == EINTR) {
      continue;
    } else {
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
  }
  return true;
}

// Writes what it can of `buf` to `fd`. False on an error (the reader left).
bool flush(int fd, std::string& buf) {
  size_t off = 0;
  while (off < buf.size()) {
    ssize_t n = send(fd, buf.data() + off, buf.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
      break;
    }
  }
  buf.erase(0, off);
  return true;
}

// Whether rank 0's store listens, as the last connect to it found, and
// when to probe it again if not.
struct Store {
  int port;
  bool up = false;
  Clock::time_point probe_at{};
  milliseconds backoff = kFirstRetry;

  void refused(Clock::time_point now) {
    up = false;
    probe_at = now + backoff;
    backoff = std::min(backoff * 2, kMaxRetry);
  }
  void joined() {
    up = true;
    backoff = kFirstRetry;
  }
};

// Starts a connect to rank 0's store on loopback for `l`.
void connect_up(Link& l, Store& store, Clock::time_point now) {
  l.up = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l.up < 0) {  // out of fds for now: as a refusal, try again later
    store.refused(now);
    return;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(store.port));
  if (connect(l.up, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    l.joined = true;
    no_delay(l.up);
    store.joined();
  } else if (errno == EINPROGRESS) {
    l.connecting = true;
  } else {  // refused: rank 0 does not listen (yet, or any more)
    close_fd(l.up);
    store.refused(now);
  }
}

// A connect under way has ended: joined, or to be tried again.
void finish_connect(Link& l, Store& store, Clock::time_point now) {
  int err = 0;
  socklen_t len = sizeof err;
  l.connecting = false;
  if (getsockopt(l.up, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
    l.joined = true;
    no_delay(l.up);
    store.joined();
    return;
  }
  close_fd(l.up);
  store.refused(now);
}

// Which links start a connect this round: all waiting ones once the store
// is known to listen; else one probe at a time, when its time has come.
void start_connects(std::vector<std::unique_ptr<Link>>& links, Store& store,
                    Clock::time_point now) {
  bool probing = false;
  for (auto& l : links) probing = probing || l->connecting;
  for (auto& lp : links) {
    Link& l = *lp;
    if (l.joined || l.connecting || l.dead) continue;
    if (!store.up && (probing || now < store.probe_at)) break;
    connect_up(l, store, now);
    probing = probing || l.connecting;
  }
}

// After a round's reads: what each side has is passed on, a side's end is
// passed on once its bytes are, and a link both sides ended is closed.
void settle(Link& l) {
  if (!l.joined) {
    // The worker left before rank 0 listened. What it sent is not passed
    // on, even a half-close's request: it may be a killed attempt's (torch
    // adds itself to the store's worker count at once), and the next
    // attempt's rank 0 must not count it.
    if (l.down_eof) l.dead = true;
    return;
  }
  if (!flush(l.up, l.to_up) || !flush(l.down, l.to_down)) {
    l.dead = true;
    return;
  }
  if (l.down_eof && l.to_up.empty() && !l.up_shut) {
    shutdown(l.up, SHUT_WR);
    l.up_shut = true;
  }
  if (l.up_eof && l.to_down.empty() && !l.down_shut) {
    shutdown(l.down, SHUT_WR);
    l.down_shut = true;
  }
  if (l.up_shut && l.down_shut) l.dead = true;
}

// Takes the connections waiting at the listener, as links, up to `max`
// (the rest wait in the backlog until links end). Out of fds, the listener
// is left alone a while.
void accept_links(int listener, std::vector<std::unique_ptr<Link>>& links, size_t max,
                  Clock::time_point now, Clock::time_point& paused_until) {
  while (links.size() < max) {
    int fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        paused_until = now + kAcceptPause;
      return;
    }
    no_delay(fd);
    auto l = std::make_unique<Link>();
    l->down = fd;
    links.push_back(std::move(l));
  }
}

size_t links_for_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return kMaxLinks;
  size_t fds = static_cast<size_t>(r.rlim_cur);
  if (fds < kFdsKept + 2 * kMinLinks) return kMinLinks;
  return std::min(kMaxLinks, (fds - kFdsKept) / 2);
}

}  // namespace

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 29500;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 29500;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

StoreRelay::StoreRelay(int port, int inner_port)
    : port_(port), inner_port_(inner_port), max_links_(links_for_fd_limit()) {
  listen_ = listen_any(port);
  try {
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    if (getsockname(listen_, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
      port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    if (inner_port_ == 0) inner_port_ = free_port();  // while port_ is ours: not it
    if (inner_port_ == port_)                         // it would relay to itself
      throw std::system_error(EINVAL, std::generic_category(), "inner port");
    if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
      throw std::system_error(errno, std::generic_category(), "pipe2");
    thread_ = std::thread([this] { loop(); });
  } catch (...) {
    close_fd(listen_);
    close_fd(wake_[0]);
    close_fd(wake_[1]);
    throw;
  }
}

StoreRelay::~StoreRelay() {
  command('q');
  thread_.join();
  close_fd(listen_);
  close_fd(wake_[0]);
  close_fd(wake_[1]);
}

void StoreRelay::command(char c) {
  while (write(wake_[1], &c, 1) < 0 && errno == EINTR) {
  }
}

void StoreRelay::drop_waiting() {
  command('d');
}

void StoreRelay::loop() {
  std::vector<std::unique_ptr<Link>> links;
  std::vector<pollfd> fds;
  Store store{inner_port_};
  Clock::time_point accept_paused_until{};
  for (;;) {
    auto now = Clock::now();
    start_connects(links, store, now);
    int timeout = -1;
    auto wake_in = [&](Clock::time_point at) {
      auto ms = std::chrono::ceil<milliseconds>(at - now).count();
      int t = static_cast<int>(std::clamp<int64_t>(ms, 0, 60000));
      timeout = timeout < 0 ? t : std::min(timeout, t);
    };
    fds.assign({{wake_[0], POLLIN, 0}, {-1, POLLIN, 0}});
    if (now < accept_paused_until)
      wake_in(accept_paused_until);
    else if (links.size() < max_links_)
      fds[1].fd = listen_;  // else -1: poll skips it
    bool waiting = false;
    for (auto& lp : links) {
      Link& l = *lp;
      l.down_slot = l.up_slot = -1;
      short down_ev = 0, up_ev = 0;
      if (!l.down_eof && l.to_up.size() < kBufferCap) down_ev |= POLLIN;
      if (l.joined) {
        if (!l.to_down.empty()) down_ev |= POLLOUT;
        if (!l.up_eof && l.to_down.size() < kBufferCap) up_ev |= POLLIN;
        if (!l.to_up.empty()) up_ev |= POLLOUT;
      } else if (l.connecting) {
        up_ev = POLLOUT;
      } else {
        waiting = true;
      }
      if (down_ev) {
        l.down_slot = static_cast<int>(fds.size());
        fds.push_back({l.down, down_ev, 0});
      }
      if (up_ev) {
        l.up_slot = static_cast<int>(fds.size());
        fds.push_back({l.up, up_ev, 0});
      }
    }
    if (waiting && !store.up) wake_in(store.probe_at);
    if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return;
    now = Clock::now();
    if (fds[0].revents) {
      char cmds[64];
      ssize_t n;
      while ((n = read(wake_[0], cmds, sizeof cmds)) > 0) {
        if (std::find(cmds, cmds + n, 'q') != cmds + n) return;
        for (auto& l : links) l->dead = l->dead || !l->joined;  // 'd'
      }
    }
    if (fds[1].revents & POLLIN) accept_links(listen_, links, max_links_, now, accept_paused_until);
    for (auto& lp : links) {
      Link& l = *lp;
      if (l.dead) continue;
      if (l.up_slot >= 0 && fds[l.up_slot].revents) {
        if (l.connecting) {
          finish_connect(l, store, now);
        } else if (!drain(l.up, l.to_down, l.up_eof)) {
          l.dead = true;
        }
      }
      if (l.down_slot >= 0 && fds[l.down_slot].revents && !drain(l.down, l.to_up, l.down_eof))
        l.dead = true;
      if (!l.dead) settle(l);
    }
    std::erase_if(links, [](const auto& l) { return l->dead; });
  }
}

}  // namespace muster::cli
