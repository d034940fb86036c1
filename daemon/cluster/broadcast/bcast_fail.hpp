// Failing a broadcast, written once for both of its routes: the
// coordinator's relay (bcast_relay.hpp) and a node's chain
// (bcast_chain.hpp). Every request parked on it gets the code and the
// sentence, the chunks it holds go, and it keeps why it failed (a request
// for it that comes later is told the same).
#pragma once

#include <string>
#include <vector>

#include "core/out_answers.hpp"

namespace muster::daemon {

// cast: a BcastRelay or a ChainCast (finished, failed, why, held);
// parked: its lists of parked requests, failed in this order (each element
// has its `to`). False, and nothing done, when the broadcast had ended
// already (finished, or failed before).
template <class Cast, class... Parked>
bool fail_broadcast(Cast& cast, ErrorCode code, const std::string& why, std::vector<Outgoing>& out,
                    Parked&... parked) {
  if (cast.finished || cast.failed != ErrorCode::kOk) return false;
  auto fail_all = [&](auto& list) {
    for (const auto& p : list) send_error(out, p.to, code, why);
    list.clear();
  };
  (fail_all(parked), ...);
  cast.held.clear();
  cast.failed = code;
  cast.why = why;
  return true;
}

}  // namespace muster::daemon
