// The client's one transport: a DEALER socket to the node's musterd that
// sends requests by id and awaits replies by id, several in flight at once
// (pipelining), and survives daemon restarts and pauses. Client's typed calls
// and the multi-node broadcast both use it. Not installed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "protocol/envelope.hpp"

namespace muster::detail {

// One context per process: contexts own I/O threads, so sharing one keeps a
// process with many clients (or threads) light.
zmq::context_t& client_context();

// Surviving a daemon restart (kill -9, then systemd's Restart=): ZeroMQ
// reconnects the socket to the ipc path by itself, but a request the dead
// daemon had read is lost with it. So a request whose reply has not come is
// sent again, byte for byte (the SAME request id): at once when the socket
// reconnects after losing its daemon (seen through a socket monitor), and
// otherwise after 1 s, 2 s, 4 s, then every 8 s. That is safe for every
// request, StoreAdd, Reserve and a Join that takes a free slot included,
// because the daemon never applies one request twice: the socket's routing
// id is chosen here and kept for the client's life, and the daemon remembers
// (routing id, request id) of the requests it still works on (a parked wait:
// a copy is dropped) and the replies to the last few it answered (a copy
// gets the same reply again), and saves those of state-changing requests
// with its state before replying, so a restarted daemon knows them too. Of
// several replies to one id the first counts; a late one carries an old id
// and is skipped. Resending only after a restart was seen (e.g. a changed
// Pong pid) would not be enough: a daemon that applied a request and died
// before replying looks the same as one that never got it.
inline constexpr std::chrono::milliseconds kFirstResend{1000};
inline constexpr std::chrono::milliseconds kMaxResend{8000};

class Connection {
 public:
  // A reply as it came: env's binary fields point into frame (on the heap,
  // so that they stay put).
  struct Reply {
    zmq::message_t frame;
    proto::Envelope env;
  };

  // Connects with a routing id of its own and starts the monitor. An ipc://
  // endpoint's directory and daemon are checked first, before anything is
  // sent; an untrusted one throws kPermissionDenied. request_timeout: how
  // long a request may go unanswered before the daemon counts as gone;
  // patience: how long a daemon that still exists (paused) is waited for.
  Connection(std::string endpoint, std::chrono::milliseconds request_timeout,
             std::chrono::milliseconds patience);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const std::string& endpoint() const { return endpoint_; }

  // Sends a request and returns its id; its reply is taken with await().
  template <class M>
  uint64_t send(const M& msg) {
    return send_with([&](uint64_t id) {
      auto frame = proto::encode(id, msg);
      return zmq::message_t(frame.data(), frame.size());
    });
  }
  // Sends the frame encode(id) makes for a fresh request id (a frame built
  // in place, e.g. a broadcast chunk); returns the id.
  template <class Encode>
  uint64_t send_with(Encode&& encode) {
    const uint64_t id = next_id_++;
    send_frame(id, encode(id));
    return id;
  }
  // Sends a request nobody will await (best effort: not resent, and
  // dropped rather than waited for when it cannot go at once; callers
  // use it on their way out of a failure).
  template <class M>
  void post(const M& msg) {
    auto frame = proto::encode(next_id_++, msg);
    zmq::message_t m(frame.data(), frame.size());
    try {
      (void)sock_.send(m, zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
      // EINTR or worse: it was best effort
    }
  }

  // The reply to request id, of the given type, or the daemon's error
  // thrown. extra_wait covers requests that wait in the daemon. The request
  // is done with afterwards, whatever happens.
  std::unique_ptr<Reply> await(uint64_t id, proto::MsgType type,
                               std::chrono::milliseconds extra_wait = {});
  template <class R>
  R await(uint64_t id, std::chrono::milliseconds extra_wait = {}) {
    return R::unpack(await(id, R::kType, extra_wait)->env.payload);
  }
  // One request, one reply.
  template <class R, class M>
  R call(const M& msg, std::chrono::milliseconds extra_wait = {}) {
    return await<R>(send(msg), extra_wait);
  }
  // Gives up on request id: its reply, should it come, is dropped.
  void forget(uint64_t id);

 private:
  struct Pending {
    uint64_t id;
    zmq::message_t frame;          // for resends (shares the bytes ZeroMQ sends)
    std::unique_ptr<Reply> reply;  // one that came before it was awaited
  };

  void connect();
  void send_frame(uint64_t id, zmq::message_t frame);
  void send_now(zmq::message_t& msg);
  Pending* find(uint64_t id);
  // Queues a copy of a request; never blocks (a full queue holds copies).
  void resend(const zmq::message_t& frame);
  void resend_all();
  // Waits up to `left` for a frame; null when none came.
  std::unique_ptr<Reply> receive(std::chrono::milliseconds left);
  [[noreturn]] void timed_out(std::chrono::steady_clock::time_point sent,
                              std::chrono::milliseconds limit) const;
  // Throws kPermissionDenied for a reply that came over ipc:// from a daemon
  // of neither our uid nor root's: one that took the socket's place after
  // connect() checked it (a restart, a race). Replies over other transports
  // carry no uid and pass. Also notes the daemon's pid.
  void check_reply(const zmq::message_t& reply);
  // True while the daemon that last answered still exists (and the
  // connection to it was not lost): worth waiting for.
  bool daemon_alive() const;
  // Reads the pending connection events; true when the socket connected
  // again after losing its daemon.
  bool reconnected();
  // An error reply that says the daemon dropped replies unread (request
  // id 0, replies_dropped): every pending request is sent again.
  static bool replies_dropped(const proto::Envelope& env);
  // Throws the refusal of the last handshake (kQuotaExceeded).
  [[noreturn]] void refused() const;

  std::string endpoint_;
  // What the socket connects to: endpoint_, or the user's own socket
  // beside it (personal_endpoint, common/endpoint.hpp).
  std::string target_;
  std::chrono::milliseconds request_timeout_, patience_;
  zmq::socket_t sock_{client_context(), zmq::socket_type::dealer};
  // Receives sock_'s connection events; unused when !monitoring_.
  zmq::socket_t monitor_{client_context(), zmq::socket_type::pair};
  bool monitoring_ = false;
  bool lost_ = false;  // the connection dropped and has not come back yet
  // The daemon refused the last handshake (its ZAP status, e.g. 400): over
  // the connections it allows this uid. 0 = not refused.
  uint32_t refused_ = 0;
  bool ipc_ = false;  // an ipc:// endpoint: check_reply() looks at each reply's sender
  // The daemon's pid, from its last reply's credentials (0 = not known): a
  // daemon that is slow (paused, a stalled disk or VM) rather than gone.
  int64_t daemon_pid_ = 0;
  uint64_t next_id_ = 1;
  std::vector<Pending> pending_;  // sent, not yet awaited; a few at most
};

}  // namespace muster::detail
