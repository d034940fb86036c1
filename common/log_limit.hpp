// Rate limits on log lines, so that no user's requests can flood the
// journal (journald drops a service's lines past its own rate limit,
// musterd's own among them). Lines are grouped by kind: the job they are
// about and the line's shape (its text without numbers and quoted user
// text). A kind writes `burst` lines per interval; the rest are counted,
// and one line says how many were left out once the interval has passed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "log.hpp"

namespace muster::log {

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  // max_kinds bounds the table: kinds past it share one entry.
  RateLimiter(uint64_t burst, std::chrono::milliseconds interval, size_t max_kinds = 1024)
      : burst_(burst), interval_(interval), max_kinds_(max_kinds) {}

  // Whether a line of `kind` may be written at `now`. Summaries due (a
  // kind whose interval ended with lines left out) are passed to `say`
  // first, as "N similar lines suppressed ...".
  bool allow(const std::string& kind, Clock::time_point now,
             const std::function<void(const std::string&)>& say);
  // The summaries of every kind that left lines out, whether due or not
  // (at exit).
  void flush(const std::function<void(const std::string&)>& say);

  uint64_t suppressed() const { return suppressed_total_; }

 private:
  struct Kind {
    Clock::time_point start;
    uint64_t written = 0;
    uint64_t dropped = 0;
    std::string example;  // the kind, for the summary
  };
  void sweep(Clock::time_point now, const std::function<void(const std::string&)>& say);
  static std::string summary(const Kind& k);

  uint64_t burst_;
  std::chrono::milliseconds interval_;
  size_t max_kinds_;
  std::unordered_map<std::string, Kind> kinds_;
  Clock::time_point swept_{};
  uint64_t suppressed_total_ = 0;
};

// The kind of a line: level, job (from fields, else its "job=" word) and
// shape, the first 64 bytes of the line with digits and '...' quotes
// taken out.
std::string line_kind(Level level, std::string_view line, const Fields& fields);

// Turns the process-wide limit on (musterd) or off (burst 0, the default:
// the client library and tools write every line).
void set_rate_limit(uint64_t burst, std::chrono::milliseconds interval);
// Writes the summaries of lines left out so far (the daemon, as it stops).
void flush_rate_limit();

// Between log.cpp and log_limit.cpp: whether the process-wide limit lets a
// line through (summaries due are added), and a line written past it.
bool rate_allows(Level level, std::string_view line, const Fields& fields,
                 std::vector<std::string>& summaries);
void write_unlimited(Level level, std::string_view line);

}  // namespace muster::log
