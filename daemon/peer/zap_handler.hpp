// The ZAP handler (RFC 27) of the daemon's zmq::context_t: every connection
// to a listener of the daemon is admitted or refused here, during its
// handshake, before it can send a request.
//   - Peer port, CURVE: a client key that Security authorises (200, user id
//     = the key in Z85, so it shows as the message property "User-Id"),
//     then the policy's cap on connections per address.
//   - Peer port, plain TCP (peer_plain): the cap per address only.
//   - Local socket (NULL mechanism; the address is libzmq's
//     "localhost:<uid>:<gid>:<pid>", from SO_PEERCRED): the cap per uid.
// A refusal is 400 with a warning naming the address (at most one a minute
// per address and reason): the client's libzmq reports
// ZMQ_EVENT_HANDSHAKE_FAILED_AUTH with 400 and the connection closes, so a
// refused connection never reaches the request handlers.
//
// Create it before the sockets bind. Not thread safe: poll socket()
// (ZMQ_POLLIN) in the loop and call handle_ready().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <zmq.hpp>

#include "peer/secure.hpp"

namespace muster::daemon::peer {

// The ZAP domain of the local socket (the peer port's is kZapDomain).
inline constexpr const char* kLocalZapDomain = "muster-local";

// Sets the local socket's ZAP domain, so that its connections meet the
// handler. Call before bind.
void make_local_server(zmq::socket_t& socket);
// The peer port's ZAP domain for plain TCP (make_server sets it for CURVE).
void make_plain_server(zmq::socket_t& socket);

// What else decides admission: each returns "" to admit, else the reason
// for refusing (a sentence that names the setting). Unset: admit.
struct ZapPolicy {
  std::function<std::string(int64_t uid)> local;
  std::function<std::string(const std::string& address)> peer;
};

class ZapHandler {
 public:
  // sec: the peering settings (CURVE keys, or plain), null when the daemon
  // does not peer. Throws Error(kConflict) when the context already has a
  // handler.
  ZapHandler(zmq::context_t& ctx, const Security* sec, ZapPolicy policy = {});
  ZapHandler(zmq::context_t& ctx, const Security& sec) : ZapHandler(ctx, &sec) {}
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  zmq::socket_t& socket() { return socket_; }
  void* handle() { return socket_.handle(); }
  // Answers every pending request; never blocks.
  void handle_ready();

  uint64_t admitted() const { return admitted_; }
  uint64_t refused() const { return refused_; }

 private:
  struct Refusal {
    std::chrono::steady_clock::time_point logged;
    uint64_t unlogged = 0;
  };
  struct Verdict {
    std::string code = "400", text = "not authorised", user;
  };
  Verdict decide_peer(const std::string& address, const std::string& mechanism,
                      const std::vector<zmq::message_t>& req);
  Verdict decide_local(const std::string& address, const std::string& mechanism);
  void refuse_log(const std::string& who, const std::string& what);

  zmq::socket_t socket_;
  bool peering_ = false, plain_ = false;
  std::set<std::string> keys_;  // binary
  ZapPolicy policy_;
  std::map<std::string, Refusal> refusals_;
  uint64_t admitted_ = 0;
  uint64_t refused_ = 0;
};

}  // namespace muster::daemon::peer
