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

void send_reply(zmq::socket_t& s, Outgoing& o) {
  if (!s) return;
  s.send(zmq::buffer(o.to.routing_id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  if (o.to.delimiter)
    s.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  s.send(take_frame(o.frame), zmq::send_flags::dontwait);
}

}  // namespace muster::daemon
