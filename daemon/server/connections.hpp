// The local socket's connections, as ReplyTo::conn tokens: one per
// connection, keyed by the fd its requests come from, dropped when ZeroMQ
// reports the connection gone (a monitor on the ROUTER), so that no reply
// follows a routing id to whoever connects under it next.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <zmq.hpp>

namespace muster::daemon {

class ClientConnections {
 public:
  explicit ClientConnections(zmq::context_t& ctx) : events_(ctx, zmq::socket_type::pair) {}

  // Monitors router's disconnections; call before it binds.
  void monitor(zmq::socket_t& router);
  // The monitor's PAIR socket, for the loop to poll.
  zmq::socket_t& events() { return events_; }
  // Forgets the connections ZeroMQ reported gone; never blocks.
  void drain();
  // The token of the connection a frame came in on (0 = unknown).
  uint64_t token_of(const zmq::message_t& frame);
  bool live(uint64_t token) const { return live_.count(token) != 0; }
  // The fd of a live connection, -1 if none (a scan: for the rare shut).
  int fd_of(uint64_t token) const;
  // Told of each connection's token once it is gone.
  void on_gone(std::function<void(uint64_t token)> f) { on_gone_ = std::move(f); }
  // Connections accepted and not yet reported gone (as of the last drain).
  uint64_t open() const { return open_; }
  // Told of each connection accepted (true) or gone (false), with its fd,
  // in the order libzmq reported them (the caps per uid: conn_caps.hpp).
  void on_event(std::function<void(bool accepted, int fd)> f) { on_event_ = std::move(f); }

 private:
  zmq::socket_t events_;
  std::unordered_map<int, uint64_t> of_fd_;
  std::unordered_set<uint64_t> live_;
  uint64_t next_ = 1;
  uint64_t open_ = 0;
  std::function<void(bool, int)> on_event_;
  std::function<void(uint64_t)> on_gone_;
};

// The next event a socket monitor reported, read without blocking: libzmq
// 4.3's frame (uint16 event, uint32 value: an fd for ACCEPTED and
// DISCONNECTED) and its endpoint frame. Malformed frames are skipped;
// nullopt once none is queued.
struct MonitorEvent {
  uint16_t event;
  uint32_t value;
};
std::optional<MonitorEvent> next_monitor_event(zmq::socket_t& monitor);

// The sender's uid and pid, as the kernel saw them when it connected; false
// when the frame carries no (well-formed) credentials.
bool peer_credentials(const zmq::message_t& frame, int64_t& uid, int64_t& pid);

}  // namespace muster::daemon
