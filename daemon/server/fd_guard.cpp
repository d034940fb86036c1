#include "server/fd_guard.hpp"

#include <dirent.h>
#include <linux/filter.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "log.hpp"
#include "muster/error.hpp"
#include "server/accept_guard.hpp"
#include "server/connections.hpp"

namespace muster::daemon {

namespace {

constexpr const char* kPeerEvents = "inproc://musterd-peer-events";
// Far from the ceiling the fds that are not connections are recounted at
// most this often (a count reads /proc/self/fd: a few ms at 30,000 fds).
constexpr auto kRecountEvery = std::chrono::seconds(1);

// path renamed to path.full, mode 0; and back, with its mode.
void set_aside(const std::string& path) {
  if (path.empty()) return;
  if (::chmod(path.c_str(), 0) != 0 || ::rename(path.c_str(), (path + ".full").c_str()) != 0)
    log::warning("cannot set " + path + " aside: " + std::strerror(errno));
}

void put_back(const std::string& path, mode_t mode) {
  if (path.empty()) return;
  if (::rename((path + ".full").c_str(), path.c_str()) != 0 || ::chmod(path.c_str(), mode) != 0)
    log::warning("cannot put " + path + " back: " + std::strerror(errno));
}

}  // namespace

uint64_t raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit want = rl;
    want.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
  }
  // select() is not used (zmq_poll is poll-based), so nothing caps it lower.
  return rl.rlim_cur == RLIM_INFINITY ? uint64_t{1} << 20 : static_cast<uint64_t>(rl.rlim_cur);
}

zmq::context_t make_daemon_context() {
  zmq::context_t ctx(1);
  // Before the first socket: libzmq sizes its socket table then.
  uint64_t want = std::min<uint64_t>(raise_fd_limit(), 65536);
  int most = zmq_ctx_get(ctx.handle(), ZMQ_SOCKET_LIMIT);
  if (most > 0) want = std::min<uint64_t>(want, static_cast<uint64_t>(most));
  if (want > 1023) zmq_ctx_set(ctx.handle(), ZMQ_MAX_SOCKETS, static_cast<int>(want));
  return ctx;
}

std::optional<uint64_t> count_open_fds() {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return std::nullopt;
  uint64_t n = 0;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n - 1;  // the directory's own fd
}

FdGuard::FdGuard(zmq::context_t& ctx, uint64_t limit, uint64_t reserve)
    : ctx_(ctx), limit_(limit), reserve_(reserve) {}

void FdGuard::monitor_peer(zmq::socket_t& peer) {
  int events = ZMQ_EVENT_LISTENING | ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED;
  if (zmq_socket_monitor(peer.handle(), kPeerEvents, events) != 0)
    throw Error(ErrorCode::kInternal,
                std::string("cannot monitor the peer socket: ") + zmq_strerror(zmq_errno()));
  auto& s = peer_events_.emplace(ctx_, zmq::socket_type::pair);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvhwm, 0);  // as ClientConnections: never block the I/O thread
  s.connect(kPeerEvents);
}

void* FdGuard::peer_events() {
  return peer_events_ ? peer_events_->handle() : nullptr;
}

void FdGuard::drain_peer() {
  if (!peer_events_) return;
  while (auto e = next_monitor_event(*peer_events_)) {
    const uint16_t event = e->event;
    const uint32_t value = e->value;
    if (event == ZMQ_EVENT_LISTENING) {
      peer_listen_fd_ = static_cast<int>(value);
    } else if (event == ZMQ_EVENT_ACCEPTED) {
      ++peer_open_;
      if (on_peer_) on_peer_(true, static_cast<int>(value));
    } else if (event == ZMQ_EVENT_DISCONNECTED) {
      if (peer_open_ > 0) --peer_open_;
      if (on_peer_) on_peer_(false, static_cast<int>(value));
    }
  }
}

void FdGuard::check(uint64_t local_open) {
  drain_peer();
  const uint64_t conns = local_open + peer_open_;
  auto now = std::chrono::steady_clock::now();
  // Near the ceiling (or paused) every decision rests on a fresh count: the
  // daemon's own fds (pidfds, files, links) come and go without events.
  bool near = base_ + conns + reserve_ >= ceiling();
  if (!counted_ || near || paused_ || now - last_count_ >= kRecountEvery) {
    auto n = count_open_fds();
    base_ = n ? (*n > conns ? *n - conns : 0) : limit_;
    counted_ = true;
    last_count_ = now;
  }
  const uint64_t in_use = base_ + conns;
  report_shed();
  if (!paused_ && in_use >= ceiling())
    pause(in_use);
  else if (paused_ && in_use + reserve_ / 2 < ceiling())
    resume(in_use);
}

// Connections the accept guard closed since the last look: the pause came
// too late for them (accept_guard.hpp).
void FdGuard::report_shed() {
  uint64_t shed = accept_guard_shed();
  if (shed == shed_seen_) return;
  const uint64_t n = shed - shed_seen_;
  log::warning("file descriptors: " + std::to_string(n) +
               (n == 1 ? " connection" : " connections") +
               " closed as soon as accepted: none left below the limit of " +
               std::to_string(limit_) + " (their clients connect again later)");
  shed_seen_ = shed;
}

void FdGuard::pause(uint64_t in_use) {
  paused_ = true;
  log::warning("file descriptors: " + std::to_string(in_use) + " of " + std::to_string(limit_) +
               " in use (" + std::to_string(peer_open_) +
               " peer connections); no new connections until some end (the limit is "
               "RLIMIT_NOFILE, the unit's LimitNOFILE=)");
  // Mode 0: a user who finds a name aside cannot connect through it either.
  set_aside(local_path_);
  set_aside(users_dir_);
  filter_peer(true);
}

void FdGuard::resume(uint64_t in_use) {
  paused_ = false;
  log::notice("file descriptors: " + std::to_string(in_use) + " of " + std::to_string(limit_) +
              " in use; accepting connections again");
  put_back(local_path_, 0660);
  put_back(users_dir_, 0711);
  filter_peer(false);
}

void FdGuard::filter_peer(bool drop) {
  if (peer_listen_fd_ < 0) return;
  int rc;
  if (drop) {
    sock_filter code[] = {BPF_STMT(BPF_RET | BPF_K, 0)};  // accept 0 bytes: drop
    sock_fprog prog{1, code};
    rc = ::setsockopt(peer_listen_fd_, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog);
  } else {
    int unused = 0;
    rc = ::setsockopt(peer_listen_fd_, SOL_SOCKET, SO_DETACH_FILTER, &unused, sizeof unused);
  }
  if (rc != 0)
    log::warning(std::string("cannot ") + (drop ? "pause" : "resume") +
                 " the peer listener: " + std::strerror(errno));
}

}  // namespace muster::daemon
