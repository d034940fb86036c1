// Why a daemon's local socket cannot be reached, found at once by one
// connect() before any request: a missing socket, a stale one (its daemon
// was killed) and one the user may not open each get their own sentence and
// what to do, instead of a request that times out after 10 s.
#pragma once

#include <string>

namespace muster::cli {

enum class Reach { kOk, kMissing, kStale, kDenied, kOther };

struct Probe {
  Reach reach = Reach::kOk;
  std::string sentence;  // empty when kOk: what happened and what to do
};

// For an ipc:// endpoint; anything else (tcp://, an abstract socket) is kOk:
// the request's own error then speaks.
Probe probe_daemon(const std::string& endpoint);

}  // namespace muster::cli
