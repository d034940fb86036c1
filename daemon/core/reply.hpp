// What the request handlers answer with: where a reply goes and the frames
// the server sends. Plain data, shared by the daemon's core and its
// multi-node side.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace muster::daemon {

// Where a reply goes, and who asked: filled in by the server.
struct ReplyTo {
  std::string routing_id;
  bool delimiter = false;  // REQ-style peer: reply needs an empty frame
  uint64_t request_id = 0;
  bool from_peer = false;  // came in on the TCP peer socket, not the local one
  // The sender's credentials (SO_PEERCRED of its ipc connection, see
  // server.cpp). peer_uid = -1 means "an in-process caller" (the fuzz
  // target, unit tests driving State directly): nothing to check against,
  // so the ownership and pid checks are skipped and a job it creates has no
  // owner. The server never passes -1 for the local socket: it refuses a
  // request whose connection carries no credentials. Requests from peer
  // daemons are authenticated by CURVE instead and act for no local user.
  int64_t peer_uid = -1;
  int64_t peer_pid = 0;
  // A peer daemon's CURVE public key (Z85), as the ZAP handshake admitted
  // it; "" for local requests and under peer-plain, which authenticates no
  // key. The reply cache binds a peer link's replies to it.
  std::string peer_key = {};
  // The local connection the request came on (the server's token for it;
  // 0 = none known). A reply is sent only while that connection lives: once
  // it is gone, another uid may connect under the same routing id.
  uint64_t conn = 0;
  // A request of this daemon's node side to the coordinator in this same
  // daemon (State::loop_back): its answer goes back to the node side, not
  // onto a socket. routing_id is then a zero byte and the link's name.
  bool here = false;
};

// What the server sends: a reply (to), or, when link is set, a request to
// the coordinator daemon at that host:port over the node's own connection.
struct Outgoing {
  ReplyTo to;
  std::string frame;
  std::string link = {};
  // An error reply's code (ErrorCode), counted by the metrics; 0 = not one.
  uint16_t error = 0;
  // A reply sent as `body` instead of frame (left empty), which `held`
  // keeps alive: a coordinator's bcast_chunk passed on to the local rank
  // without a copy. Never kept by the reply cache (a resent pull is asked
  // upstream again).
  std::shared_ptr<void> held = {};
  std::string_view body = {};
  // A request on `link` to the coordinator in this same daemon: handled
  // here, before the round's save (State::loop_back), never sent.
  bool here = false;
};

}  // namespace muster::daemon
