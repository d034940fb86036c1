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
