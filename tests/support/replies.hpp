// What State-level tests read of every frame a State wrote: its routing id,
// request id, type and, for an error, its code and sentence. Each test adds
// the fields of the reply types it cares about (derive from ReplyHead).
// And a request frame handed to a State as a sender's.
#pragma once

#include <string>
#include <vector>

#include "core/state.hpp"
#include "protocol/envelope.hpp"

namespace muster::test {

struct ReplyHead {
  std::string to;
  uint64_t id = 0;
  uint16_t type = 0;
  ErrorCode code = ErrorCode::kOk;
  std::string message;
};

// env: o's frame, decoded by the caller, who reads the rest from it.
inline ReplyHead reply_head(const daemon::Outgoing& o, const proto::Envelope& env) {
  ReplyHead h;
  h.to = o.to.routing_id;
  h.id = env.request_id;
  h.type = env.type;
  if (h.type == static_cast<uint16_t>(proto::MsgType::kErrorReply)) {
    auto e = proto::ErrorReply::unpack(env.payload);
    h.code = static_cast<ErrorCode>(e.code);
    h.message = e.message;
  }
  return h;
}

// What State s writes for the request frame as if it came from `to` (whose
// request id is taken from the frame).
inline std::vector<daemon::Outgoing> handle_frame(daemon::State& s, daemon::ReplyTo to,
                                                  const std::string& frame) {
  auto env = proto::decode_envelope(frame.data(), frame.size());
  to.request_id = env.request_id;
  std::vector<daemon::Outgoing> out;
  s.handle(to, env, out);
  return out;
}

// The frames of out for clients, in order; to_links counts the others, sent
// on to links (a coordinator, peer daemons).
inline std::vector<std::string> client_frames(const std::vector<daemon::Outgoing>& out,
                                              size_t& to_links) {
  std::vector<std::string> frames;
  for (const auto& o : out) {
    if (o.link.empty())
      frames.push_back(o.frame);
    else
      ++to_links;
  }
  return frames;
}

}  // namespace muster::test
