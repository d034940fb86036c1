// The one place an exception stops: whatever a request, a peer's frame, a
// timer or a source of the loop throws (muster::Error, zmq::error_t,
// std::bad_alloc, msgpack's errors, anything) ends that piece of work
// alone, never the daemon. Request handlers turn what they can into an
// error reply first (server/intake.cpp); this is what stands behind them.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

namespace muster::daemon::event {

// What an exception says, for a log line or a reply (never throws).
std::string describe_exception(std::exception_ptr e) noexcept;

// Logs (rate limited) that `what` failed with e; counted in failures().
void contained_failure(const char* what, std::exception_ptr e) noexcept;

// How many pieces of work ended in an exception so far.
uint64_t failures() noexcept;

// Runs f(); an exception it throws is logged and swallowed: false.
template <class F>
bool contained(const char* what, F&& f) noexcept {
  try {
    f();
    return true;
  } catch (...) {
    contained_failure(what, std::current_exception());
    return false;
  }
}

}  // namespace muster::daemon::event
