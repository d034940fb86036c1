#include "cli/store_relay.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
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
// Connections at once; more are closed at accept. A job has a connection or
// two a rank; the cap keeps a port scanner from taking the launcher's fds.
constexpr size_t kMaxLinks = 4096;
// How soon a refused connect to rank 0's store is tried again: soon at
// first (rank 0 is about to listen), then less often.
constexpr milliseconds kFirstRetry{2};
constexpr milliseconds kMaxRetry{50};

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
  Clock::time_point retry_at{};
  milliseconds backoff = kFirstRetry;
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

// Starts (or retries) the connect to rank 0's store on loopback.
void connect_up(Link& l, int inner_port, Clock::time_point now) {
  l.up = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l.up < 0) {  // out of fds for now: try again later
    l.retry_at = now + kMaxRetry;
    return;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(inner_port));
  if (connect(l.up, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    l.joined = true;
  } else if (errno == EINPROGRESS) {
    l.connecting = true;
  } else {  // refused: rank 0 does not listen yet
    close_fd(l.up);
    l.retry_at = now + l.backoff;
    l.backoff = std::min(l.backoff * 2, kMaxRetry);
  }
  if (l.joined) no_delay(l.up);
}

// A connect under way has ended: joined, or to be tried again.
void finish_connect(Link& l, Clock::time_point now) {
  int err = 0;
  socklen_t len = sizeof err;
  l.connecting = false;
  if (getsockopt(l.up, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
    l.joined = true;
    no_delay(l.up);
    return;
  }
  close_fd(l.up);
  l.retry_at = now + l.backoff;
  l.backoff = std::min(l.backoff * 2, kMaxRetry);
}

// After a round's reads: what each side has is passed on, a side's end is
// passed on once its bytes are, and a link both sides ended is closed.
void settle(Link& l) {
  if (!l.joined) {
    // The worker left (or half-closed) before rank 0 listened, with
    // nothing to deliver: nobody is waiting for this link.
    if (l.down_eof && l.to_up.empty()) l.dead = true;
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

}  // namespace

StoreRelay::StoreRelay(int port, int inner_port) : port_(port), inner_port_(inner_port) {
  listen_ = listen_any(port);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (getsockname(listen_, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    int err = errno;
    close_fd(listen_);
    throw std::system_error(err, std::generic_category(), "pipe2");
  }
  thread_ = std::thread([this] { loop(); });
}

StoreRelay::~StoreRelay() {
  char c = 0;
  while (write(wake_[1], &c, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  close_fd(listen_);
  close_fd(wake_[0]);
  close_fd(wake_[1]);
}

void StoreRelay::loop() {
  std::vector<std::unique_ptr<Link>> links;
  std::vector<pollfd> fds;
  for (;;) {
    auto now = Clock::now();
    int timeout = -1;
    fds.assign({{wake_[0], POLLIN, 0}, {listen_, POLLIN, 0}});
    for (auto& lp : links) {
      Link& l = *lp;
      if (!l.joined && !l.connecting && l.up < 0 && now >= l.retry_at)
        connect_up(l, inner_port_, now);
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
        auto wait = std::chrono::ceil<milliseconds>(l.retry_at - now).count();
        int ms = static_cast<int>(std::max<int64_t>(wait, 0));
        timeout = timeout < 0 ? ms : std::min(timeout, ms);
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
    if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return;
    if (fds[0].revents) return;
    now = Clock::now();
    if (fds[1].revents & POLLIN) {
      for (;;) {
        int fd = accept4(listen_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;  // EAGAIN, or out of fds: the rest wait in the backlog
        if (links.size() >= kMaxLinks) {
          close(fd);
          continue;
        }
        no_delay(fd);
        auto l = std::make_unique<Link>();
        l->down = fd;
        l->retry_at = now;
        links.push_back(std::move(l));
      }
    }
    for (auto& lp : links) {
      Link& l = *lp;
      if (l.up_slot >= 0 && fds[l.up_slot].revents) {
        if (l.connecting) {
          finish_connect(l, now);
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
