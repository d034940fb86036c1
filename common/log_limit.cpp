#include "log_limit.hpp"

#include <algorithm>
#include <mutex>
#include <optional>
#include <vector>

namespace muster::log {

namespace {

constexpr size_t kShapeBytes = 64;
constexpr const char* kOverflow = "\x01(other kinds)";

}  // namespace

std::string RateLimiter::summary(const Kind& k) {
  return std::to_string(k.dropped) + " similar line(s) suppressed (rate limit), like: " + k.example;
}

void RateLimiter::sweep(Clock::time_point now, const std::function<void(const std::string&)>& say) {
  // At most once per second: the table is bounded, the walk is not free.
  if (now - swept_ < std::chrono::seconds(1)) return;
  swept_ = now;
  for (auto it = kinds_.begin(); it != kinds_.end();) {
    Kind& k = it->second;
    if (now - k.start < interval_) {
      ++it;
      continue;
    }
    if (k.dropped > 0) say(summary(k));
    // A quiet kind is forgotten; a busy one starts a new interval on its
    // next line.
    if (k.dropped == 0 && now - k.start >= 2 * interval_) {
      it = kinds_.erase(it);
      continue;
    }
    k.start = now;
    k.written = 0;
    k.dropped = 0;
    ++it;
  }
}

bool RateLimiter::allow(const std::string& kind, Clock::time_point now,
                        const std::function<void(const std::string&)>& say) {
  if (burst_ == 0) return true;
  sweep(now, say);
  auto it = kinds_.find(kind);
  if (it == kinds_.end()) {
    const std::string& key = kinds_.size() < max_kinds_ ? kind : std::string(kOverflow);
    size_t nul = kind.find('\0');
    std::string example =
        nul == std::string::npos ? kind : kind.substr(std::min(nul + 3, kind.size()));
    if (nul != std::string::npos && nul > 0)
      example = "job=" + kind.substr(0, nul) + ": " + example;
    it = kinds_.try_emplace(key, Kind{now, 0, 0, example}).first;
    if (key == kOverflow) it->second.example = "lines of many kinds";
  }
  Kind& k = it->second;
  if (now - k.start >= interval_) {
    if (k.dropped > 0) say(summary(k));
    k.start = now;
    k.written = 0;
    k.dropped = 0;
  }
  if (k.written < burst_) {
    ++k.written;
    return true;
  }
  ++k.dropped;
  ++suppressed_total_;
  return false;
}

void RateLimiter::flush(const std::function<void(const std::string&)>& say) {
  for (auto& [key, k] : kinds_)
    if (k.dropped > 0) {
      say(summary(k));
      k.dropped = 0;
    }
}

std::string line_kind(Level level, std::string_view line, const Fields& fields) {
  std::string job(fields.job);
  if (job.empty())
    if (auto at = line.find("job="); at != std::string_view::npos) {
      auto end = line.find_first_of(" :,", at + 4);
      job = line.substr(at + 4, end == std::string_view::npos ? end : end - at - 4);
    }
  std::string k = job.substr(0, 128);
  k += '\0';
  k += static_cast<char>('0' + static_cast<int>(level));
  k += ' ';
  bool quoted = false;
  for (char c : line) {
    if (k.size() >= job.size() + 3 + kShapeBytes) break;
    if (c == '\'') {
      quoted = !quoted;
      k += c;
      continue;
    }
    if (quoted || (c >= '0' && c <= '9')) continue;
    k += c;
  }
  return k;
}

namespace {

std::mutex g_mu;
std::optional<RateLimiter> g_limiter;

}  // namespace

void set_rate_limit(uint64_t burst, std::chrono::milliseconds interval) {
  std::lock_guard lock(g_mu);
  if (burst == 0)
    g_limiter.reset();
  else
    g_limiter.emplace(burst, interval);
}

void flush_rate_limit() {
  std::vector<std::string> summaries;
  {
    std::lock_guard lock(g_mu);
    if (g_limiter) g_limiter->flush([&](const std::string& s) { summaries.push_back(s); });
  }
  for (const auto& s : summaries) write_unlimited(Level::kNotice, s);
}

// Called by write() (log.cpp) for each line at or under the level.
bool rate_allows(Level level, std::string_view line, const Fields& fields,
                 std::vector<std::string>& summaries) {
  std::lock_guard lock(g_mu);
  if (!g_limiter) return true;
  return g_limiter->allow(line_kind(level, line, fields), RateLimiter::Clock::now(),
                          [&](const std::string& s) { summaries.push_back(s); });
}

}  // namespace muster::log
