// One request as a handler receives it, after the dispatcher (dispatch.cpp)
// checked it against its row of the message table: where the answer goes,
// the frame, the row, and the job it names, decoded once (JobScope). A
// handler unpacks its own payload and answers through out, now or later.
#pragma once

#include <vector>

#include "core/job_scope.hpp"
#include "core/reply.hpp"
#include "protocol/envelope.hpp"
#include "protocol/message_table.hpp"

namespace muster::daemon {

struct Request {
  const ReplyTo& to;
  const proto::Envelope& env;
  const proto::MessageTraits& t;
  const JobScope& scope;  // empty for a request of a peer daemon
  std::vector<Outgoing>& out;

  template <class M>
  M unpack() const {
    return M::unpack(env.payload);
  }
  template <class M>
  void reply(const M& m) const {
    out.push_back({to, proto::encode(to.request_id, m)});
  }
};

class State;

// A row of the daemon's column of the message table: the handler of one
// request type (dispatch.cpp).
struct Handler {
  proto::MsgType type;
  void (*handle)(State& state, const Request& r);
};

}  // namespace muster::daemon
