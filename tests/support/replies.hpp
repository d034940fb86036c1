// What State-level tests read of every frame a State wrote: its routing id,
// request id, type and, for an error, its code and sentence. Each test adds
// the fields of the reply types it cares about (derive from ReplyHead).
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

}  // namespace muster::test
