// This node's connections to the coordinators of its multi-node jobs: one
// DEALER per coordinator (host:port), made on first use, each polled by the
// event loop for the coordinator's answers. Each has a routing id of its
// own, random and kept for the daemon's life, so that the coordinator (its
// reply cache) knows a request sent again after a reconnect; each
// handshake after the first (the coordinator restarted, or the connection
// dropped) is reported, for the requests in flight to be sent again.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <zmq.hpp>

#include "event/loop.hpp"

namespace muster::daemon {

namespace peer {
struct Security;
}

class PeerLinks {
 public:
  // Called with each frame a coordinator sends (name = its host:port),
  // which the callee may keep (move).
  using OnFrame = std::function<void(const std::string& name, zmq::message_t& frame)>;
  // Called when the link to `name` connected again after it was connected.
  using OnReconnect = std::function<void(const std::string& name)>;
  // Links are served at `order` in the loop; security is null where
  // peering is unavailable (nothing is then sent).
  PeerLinks(zmq::context_t& ctx, event::Loop& loop, int order, const peer::Security* security,
            OnFrame on_frame, OnReconnect on_reconnect);

  // Sends a request to the coordinator at `name`, connecting first if
  // needed. Dropped when no connection can be made: the state gives up on
  // it after the peer timeout.
  void send(const std::string& name, std::string& frame);
  // Closes the links `keep` says no to.
  void prune(const std::function<bool(const std::string&)>& keep);

 private:
  // Not movable (the loop holds its event): lives in its map node.
  struct Link {
    Link(PeerLinks& owner, std::string name, zmq::socket_t s, zmq::socket_t mon);
    std::string name;
    zmq::socket_t sock;
    zmq::socket_t monitor;  // PAIR on the socket's handshake events
    int handshakes = 0;
    event::SocketEvent event;
    event::SocketEvent monitor_event;
  };
  // Null when no link can be made (no peering, or ZeroMQ refused).
  zmq::socket_t* connect(const std::string& name);
  zmq::socket_t* connect_now(const std::string& name);
  void read(Link& link);
  void watch(Link& link);

  zmq::context_t& ctx_;
  event::Loop& loop_;
  int order_;
  const peer::Security* security_;
  OnFrame on_frame_;
  OnReconnect on_reconnect_;
  uint64_t monitors_ = 0;  // inproc endpoints made so far
  std::map<std::string, Link> links_;
};

}  // namespace muster::daemon
