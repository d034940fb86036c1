// Client::Impl, shared by the files of client/lib that add services to
// muster::Client (store, broadcast, shards, NCCL ids). Not installed.
#pragma once

#include <algorithm>
#include <cerrno>
#include <optional>
#include <zmq.hpp>

#include "muster/client.hpp"
#include "protocol/envelope.hpp"
#include "protocol/limits.hpp"

namespace muster {

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
// with its state before replying, so a restarted daemon knows them too
// (daemon/persist/). Of several replies to one id the first counts; a late
// one carries an old id and is skipped. Resending only after a restart was
// seen (e.g. a changed Pong pid) would not be enough: a daemon that applied
// a request and died before replying looks the same as one that never got
// it.
inline constexpr std::chrono::milliseconds kFirstResend{1000};
inline constexpr std::chrono::milliseconds kMaxResend{8000};

struct Client::Impl {
  ClientOptions opts;
  zmq::socket_t sock{client_context(), zmq::socket_type::dealer};
  // Receives sock's connection events (client.cpp); unused when !monitoring.
  zmq::socket_t monitor{client_context(), zmq::socket_type::pair};
  bool monitoring = false;
  bool lost = false;  // the connection dropped and has not come back yet
  bool ipc = false;   // an ipc:// endpoint: check_reply() looks at each reply's sender
  // The daemon's pid, from its last reply's credentials (0 = not known): a
  // daemon that is slow (paused, a stalled disk or VM) rather than gone.
  int64_t daemon_pid = 0;
  uint64_t next_id = 1;
  std::optional<RankInfo> info;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  // The monitor stops before its sockets close: sock must not report
  // events to a closed peer.
  ~Impl() {
    if (monitoring) zmq_socket_monitor(sock.handle(), nullptr, 0);
  }

  // Connects sock with a routing id of its own and starts the monitor. An
  // ipc:// endpoint's directory and daemon are checked first, before
  // anything is sent (common/trust.hpp); an untrusted one throws
  // kPermissionDenied.
  void connect(const std::string& endpoint);
  // Throws kPermissionDenied for a reply that came over ipc:// from a daemon
  // of neither our uid nor root's: one that took the socket's place after
  // connect() checked it (a restart, a race). Replies over other transports
  // carry no uid and pass.
  // Also notes the daemon's pid.
  void check_reply(const zmq::message_t& reply);
  // True while the daemon that last answered still exists (and the
  // connection to it was not lost): worth waiting for.
  bool daemon_alive() const;
  // Reads the pending connection events; true when the socket connected
  // again after losing its daemon.
  bool reconnected();
  // Queues a copy of a request; never blocks (a full queue holds copies).
  void resend(const std::string& frame);

  // Sends one request and returns the reply's envelope, or throws the
  // daemon's error. extra_wait covers requests that wait in the daemon.
  template <class Reply, class M>
  Reply call(const M& msg, std::chrono::milliseconds extra_wait = {}) {
    uint64_t id = next_id++;
    auto frame = proto::encode(id, msg);
    // The daemon would drop the connection for a larger frame; say why here.
    if (frame.size() > limits::kMaxFrameBytes)
      throw Error(ErrorCode::kTooLarge, "request of " + std::to_string(frame.size()) +
                                            " bytes exceeds the protocol's frame limit of " +
                                            std::to_string(limits::kMaxFrameBytes));
    reconnected();  // what happened between calls is no reason to resend
    for (;;) {
      try {
        sock.send(zmq::buffer(frame), zmq::send_flags::none);
        break;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw Error(ErrorCode::kInternal, e.what());
      }
    }
    auto now = std::chrono::steady_clock::now();
    auto deadline = now + opts.request_timeout + extra_wait;
    // A daemon that is alive but silent (SIGSTOP, a slow disk, a stalled
    // VM) is waited for up to the longer of this and the wait timeout; a
    // daemon that is gone fails the request at `deadline`, as before.
    const auto sent = now;
    const auto patience = now + std::max(opts.request_timeout + extra_wait, opts.wait_timeout);
    auto resend_every = kFirstResend;
    auto resend_at = now + resend_every;
    for (;;) {
      now = std::chrono::steady_clock::now();
      if (now >= resend_at) {
        resend(frame);
        resend_every = std::min(2 * resend_every, kMaxResend);
        resend_at = now + resend_every;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::min(deadline, resend_at) - now);
      if (left.count() < 0) left = std::chrono::milliseconds(0);
      zmq::pollitem_t items[2] = {{sock.handle(), 0, ZMQ_POLLIN, 0},
                                  {monitor.handle(), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, monitoring ? 2 : 1, left);
      } catch (const zmq::error_t& e) {
        // A signal (SIGCHLD from data loader workers, profilers) is no error.
        if (e.num() == EINTR) continue;
        throw Error(ErrorCode::kInternal, e.what());
      }
      if (monitoring && (items[1].revents & ZMQ_POLLIN) && reconnected()) resend(frame);
      if (!(items[0].revents & ZMQ_POLLIN)) {
        now = std::chrono::steady_clock::now();
        if (now < deadline) continue;
        if (now < patience && daemon_alive()) {
          deadline = std::min(patience, now + std::chrono::milliseconds(500));
          continue;
        }
        if (daemon_alive())
          throw Error(
              ErrorCode::kUnavailable,
              "musterd at " + opts.endpoint + " (pid " + std::to_string(daemon_pid) +
                  ") is running but has not answered for " +
                  std::to_string(
                      std::chrono::duration_cast<std::chrono::seconds>(now - sent).count()) +
                  " s (paused or stalled?)");
        throw Error(ErrorCode::kUnavailable,
                    "no reply from musterd at " + opts.endpoint + " within " +
                        std::to_string((opts.request_timeout + extra_wait).count()) +
                        " ms (is musterd running? `muster run` starts one for its job)");
      }
      zmq::message_t reply;
      if (!sock.recv(reply, zmq::recv_flags::dontwait)) continue;
      check_reply(reply);
      proto::Envelope env;
      try {
        env = proto::decode_envelope(reply.data(), reply.size());
      } catch (const Error& e) {
        throw Error(ErrorCode::kBadMessage, std::string("bad reply from musterd: ") + e.what());
      }
      if (env.request_id != id) continue;  // a late reply to an abandoned request
      if (env.type == static_cast<uint16_t>(proto::MsgType::kErrorReply)) {
        auto err = proto::ErrorReply::unpack(env.payload);
        throw Error(static_cast<ErrorCode>(err.code), err.message);
      }
      if (env.type != static_cast<uint16_t>(Reply::kType))
        throw Error(ErrorCode::kBadMessage,
                    std::string("musterd answered ") + proto::type_name(env.type) + " instead of " +
                        proto::type_name(static_cast<uint16_t>(Reply::kType)));
      return Reply::unpack(env.payload);
    }
  }

  const std::string& job() const {
    if (!info)
      throw Error(ErrorCode::kInvalidArgument,
                  "this client has not joined a job; call join() first");
    return info->job;
  }
  // The generation fence of store requests and barriers: the generation
  // this client joined, so a rank of an older generation cannot publish into
  // (or wait on) a newer one.
  std::optional<uint64_t> generation() const {
    if (!info) return std::nullopt;
    return info->generation;
  }
  int64_t wait_ms(std::optional<std::chrono::milliseconds> t) const {
    auto ms = (t ? *t : opts.wait_timeout).count();
    return std::clamp<int64_t>(ms, 0, limits::kMaxTimeoutMs);
  }
};

}  // namespace muster
