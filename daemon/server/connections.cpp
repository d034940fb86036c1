#include "server/connections.hpp"

#include <cstring>
#include <string>
#include <string_view>

#include "muster/error.hpp"
#include "trust.hpp"

namespace muster::daemon {

namespace {
constexpr const char* kRouterEvents = "inproc://musterd-router-events";
}

void ClientConnections::monitor(zmq::socket_t& router) {
  // Accepted too: the fd guard (fd_guard.hpp) counts open connections.
  if (zmq_socket_monitor(router.handle(), kRouterEvents,
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0)
    throw Error(ErrorCode::kInternal,
                std::string("cannot monitor the socket: ") + zmq_strerror(zmq_errno()));
  events_.set(zmq::sockopt::linger, 0);
  // Unbounded, and polled by the loop: a full event pipe would block
  // ZeroMQ's one I/O thread (every socket of the daemon) until it is read,
  // and connections that never send anything would not wake us to read it.
  events_.set(zmq::sockopt::rcvhwm, 0);
  events_.connect(kRouterEvents);
}

std::optional<MonitorEvent> next_monitor_event(zmq::socket_t& monitor) {
  for (;;) {
    zmq::message_t ev;
    if (!monitor.recv(ev, zmq::recv_flags::dontwait)) return std::nullopt;
    for (bool more = ev.more(); more;) {  // the endpoint frame
      zmq::message_t rest;
      more = monitor.recv(rest, zmq::recv_flags::dontwait) && rest.more();
    }
    if (ev.size() < 6) continue;
    MonitorEvent e;
    std::memcpy(&e.event, ev.data(), sizeof e.event);
    std::memcpy(&e.value, static_cast<const char*>(ev.data()) + 2, sizeof e.value);
    return e;
  }
}

void ClientConnections::drain() {
  while (auto e = next_monitor_event(events_)) {
    const uint16_t event = e->event;
    const uint32_t fd = e->value;
    if (event == ZMQ_EVENT_ACCEPTED) {
      ++open_;
      if (on_event_) on_event_(true, static_cast<int>(fd));
    }
    if (event != ZMQ_EVENT_DISCONNECTED) continue;
    if (on_event_) on_event_(false, static_cast<int>(fd));
    if (open_ > 0) --open_;
    if (auto it = of_fd_.find(static_cast<int>(fd)); it != of_fd_.end()) {
      live_.erase(it->second);
      if (on_gone_) on_gone_(it->second);
      of_fd_.erase(it);
    }
  }
}

int ClientConnections::fd_of(uint64_t token) const {
  for (const auto& [fd, t] : of_fd_)
    if (t == token) return fd;
  return -1;
}

uint64_t ClientConnections::token_of(const zmq::message_t& frame) {
  // ZMQ_SRCFD is deprecated but kept in 4.3: the fd a frame came in on.
  int fd = zmq_msg_get(const_cast<zmq_msg_t*>(frame.handle()), ZMQ_SRCFD);
  if (fd < 0) return 0;
  auto [it, fresh] = of_fd_.try_emplace(fd, 0);
  if (fresh) {
    it->second = next_++;
    live_.insert(it->second);
  }
  return it->second;
}

// For an ipc:// connection libzmq (4.3, built with SO_PEERCRED support, as
// Debian's is) appends the peer's credentials, taken by the kernel when the
// peer connected, to every frame's "Peer-Address" property:
// "<address>:<uid>:<gid>:<pid>" ("localhost:1000:1000:4242" with 4.3.4).
bool peer_credentials(const zmq::message_t& frame, int64_t& uid, int64_t& pid) {
  const char* prop = zmq_msg_gets(frame.handle(), "Peer-Address");
  int64_t gid = 0;
  return prop && trust::parse_peer_address(prop, uid, gid, pid);
}

}  // namespace muster::daemon
