#include "server/frames.hpp"

#include "core/state.hpp"  // Outgoing

namespace muster::daemon {

zmq::message_t take_frame(std::string& frame) {
  constexpr size_t kHandOver = 64 * 1024;
  if (frame.size() < kHandOver) return zmq::message_t(frame.data(), frame.size());
  auto* owned = new std::string(std::move(frame));
  return zmq::message_t(
      owned->data(), owned->size(),
      [](void*, void* hint) { delete static_cast<std::string*>(hint); }, owned);
}

SendResult send_reply(zmq::socket_t& s, Outgoing& o) {
  if (!s) return SendResult::kGone;
  // With ZMQ_ROUTER_MANDATORY the routing id frame says whether the
  // connection takes the whole reply (libzmq's HWM counts whole messages):
  // EAGAIN there queues nothing.
  try {
    if (!s.send(zmq::buffer(o.to.routing_id), zmq::send_flags::sndmore | zmq::send_flags::dontwait))
      return SendResult::kFull;
  } catch (const zmq::error_t&) {
    return SendResult::kGone;  // EHOSTUNREACH
  }
  if (o.to.delimiter)
    s.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  if (o.held) {
    auto* keep = new std::shared_ptr<void>(std::move(o.held));
    s.send(zmq::message_t(
               const_cast<char*>(o.body.data()), o.body.size(),
               [](void*, void* hint) { delete static_cast<std::shared_ptr<void>*>(hint); }, keep),
           zmq::send_flags::dontwait);
    return SendResult::kSent;
  }
  s.send(take_frame(o.frame), zmq::send_flags::dontwait);
  return SendResult::kSent;
}

}  // namespace muster::daemon
