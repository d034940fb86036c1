// Local clients that stop reading their replies. ZeroMQ gives no way to
// empty one connection's queue, so what the daemon can free is freed: once
// a connection's queue is full (--reply-queue) its replies are dropped, and
// so are the gets and waits parked for it (the keys they name can be
// large, and their replies would be dropped too). Once the connection takes
// a frame again, it gets one error with request id 0, replies_dropped, and
// libmuster sends every request it still awaits again: the replies come
// from the reply cache or from doing the read again, the waits park anew.
// A notice rather than a closed connection: the client keeps its place
// (its routing id, its parked barrier arrivals), and needs no reconnect.
// What the unread replies pin counts against the memory ceiling
// (pinned_replies.hpp): past it, the connection pinning most is shut.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <zmq.hpp>

#include "core/state.hpp"
#include "persist/reply_cache.hpp"
#include "server/connections.hpp"
#include "server/pinned_replies.hpp"

namespace muster::daemon {

class UnreadClients {
 public:
  // depth: the replies a connection's queue holds at most (--reply-queue
  // + 1).
  explicit UnreadClients(size_t depth) : pinned_(depth) {}

  // A reply of `bytes` went to connection conn, of uid.
  void sent(uint64_t conn, int64_t uid, uint64_t bytes) { pinned_.sent(conn, uid, bytes); }
  // conn's queue filled (said once a round): the gets and waits parked for
  // it are forgotten, and it is told once it reads again.
  void overflowed(uint64_t conn, const std::string& routing_id, State& state, ReplyCache& replies);
  // A reply to a full queue was dropped.
  void dropped() { ++replies_dropped_; }
  // At the end of a delivery: tells the connections that read again; shuts
  // those whose pinned replies take the daemon or their uid over the
  // memory ceiling; says (once in 10 s) that `overflowing` connections
  // overflowed this round.
  void after_delivery(zmq::socket_t& router, const ClientConnections& conns, const State& state,
                      size_t overflowing);
  // The connection ended.
  void ended(uint64_t conn) { pinned_.ended(conn); }

  // Some are yet to hear that replies were dropped (the loop looks again
  // soon).
  bool waiting() const { return !unread_.empty(); }
  uint64_t replies_dropped() const { return replies_dropped_; }

 private:
  void notify(zmq::socket_t& router, const ClientConnections& conns);
  void bound(const ClientConnections& conns, const State& state);

  PinnedReplies pinned_;
  // Connections whose replies were dropped and that are yet to hear it
  // (token -> routing id).
  std::map<uint64_t, std::string> unread_;
  uint64_t replies_dropped_ = 0;  // to local clients whose queue was full
  uint64_t waits_dropped_ = 0;    // parked for them
  Clock::time_point pinned_logged_{};
  Clock::time_point drop_logged_{};
};

}  // namespace muster::daemon
