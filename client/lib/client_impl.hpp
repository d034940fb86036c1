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

struct Client::Impl {
  ClientOptions opts;
  zmq::socket_t sock{client_context(), zmq::socket_type::dealer};
  uint64_t next_id = 1;
  std::optional<RankInfo> info;

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
    for (;;) {
      try {
        sock.send(zmq::buffer(frame), zmq::send_flags::none);
        break;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw Error(ErrorCode::kInternal, e.what());
      }
    }
    auto deadline = std::chrono::steady_clock::now() + opts.request_timeout + extra_wait;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() < 0) left = std::chrono::milliseconds(0);
      zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
      try {
        zmq::poll(&item, 1, left);
      } catch (const zmq::error_t& e) {
        // A signal (SIGCHLD from data loader workers, profilers) is no error.
        if (e.num() == EINTR) continue;
        throw Error(ErrorCode::kInternal, e.what());
      }
      if (!(item.revents & ZMQ_POLLIN)) {
        throw Error(ErrorCode::kUnavailable,
                    "no reply from musterd at " + opts.endpoint + " within " +
                        std::to_string((opts.request_timeout + extra_wait).count()) +
                        " ms (is musterd running? `muster run` starts one for its job)");
      }
      zmq::message_t reply;
      if (!sock.recv(reply, zmq::recv_flags::dontwait)) continue;
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
