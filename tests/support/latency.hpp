// Another user's requests, timed while an attack runs (issue 43: other
// users keep a p99 <= 100 ms during every attack): a thread of the test's
// own process pings the daemon until stop(), each ping on a connection of
// its own made then (as `muster status` does) with libmuster's reconnect
// interval, or all on one connection kept open (as a rank's). Uses no
// Catch2: the test checks the result.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace muster::test {

// The bound on others' p99 (ms) that the hostile tests check. Not under
// AddressSanitizer: its daemon runs two to three times slower, and a flood
// beside it took root's p99 to ~200 ms there; the default build (which CI
// runs too) checks the bound. (Nor resident sizes: ASan keeps freed memory
// in quarantine.)
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kLatencyChecked = false;
#else
inline constexpr bool kLatencyChecked = true;
#endif
inline bool p99_within_bound(double ms) {
  return !kLatencyChecked || ms <= 100;
}

// Start a probe after any AsNobody it runs beside: forking a process while
// the probe's thread runs (and holds a lock an allocator or libzmq needs)
// left an AsNobody child unable to get a reply under ASan.
class LatencyProbe {
 public:
  struct Result {
    double p99_ms = 0, p50_ms = 0;
    size_t n = 0;
    int unanswered = 0;
    std::string line() const;  // "p99 X ms, p50 Y ms, N pings, U unanswered"
  };
  explicit LatencyProbe(std::string endpoint, bool fresh_connections = true);
  ~LatencyProbe();
  LatencyProbe(const LatencyProbe&) = delete;
  LatencyProbe& operator=(const LatencyProbe&) = delete;

  // Stops the pings (once) and says how they went: after at least
  // `at_least` of them (at most 10 s more), so that a p99 is not just the
  // slowest of a few; the attack's state is still there meanwhile.
  Result stop(size_t at_least = 100);

 private:
  void run();
  std::string endpoint_;
  bool fresh_;
  std::atomic<bool> stop_{false};
  std::vector<double> ms_;
  std::atomic<size_t> count_{0};
  int unanswered_ = 0;
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace muster::test
