#include "support/raw.hpp"

#include <stdexcept>
#include <zmq.hpp>

namespace muster::test {

proto::ErrorReply raw_error_reply(const std::string& endpoint, const std::string& bytes,
                                  uint64_t* request_id) {
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 10000);
  s.connect(endpoint);
  s.send(zmq::buffer(bytes));
  zmq::message_t reply;
  if (!s.recv(reply)) throw std::runtime_error("no reply from " + endpoint);
  auto env = proto::decode_envelope(reply.data(), reply.size());
  if (env.type != static_cast<uint16_t>(proto::MsgType::kErrorReply))
    throw std::runtime_error(std::string("expected an error reply, got ") +
                             proto::type_name(env.type));
  if (request_id) *request_id = env.request_id;
  return proto::ErrorReply::unpack(env.payload);
}

}  // namespace muster::test
