#include "cli/preflight.hpp"

#include <charconv>
#include <cstdlib>

#include "log.hpp"
#include "protocol/limits.hpp"

namespace muster::cli {

std::string bad_environment() {
  if (const char* s = std::getenv("MUSTER_TIMEOUT_S"); s && *s) {
    const std::string v = s;
    const int64_t max = limits::kMaxTimeoutMs / 1000;
    int64_t n = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || p != v.data() + v.size() || n < 0 || n > max)
      return "MUSTER_TIMEOUT_S='" + v + "' is not a number of seconds from 0 to " +
             std::to_string(max) + ": set it to one (MUSTER_TIMEOUT_S=300) or unset it";
  }
  if (const char* s = std::getenv("MUSTER_LOG_LEVEL"); s && *s) {
    log::Level level;
    if (!log::parse_level(s, level))
      return "MUSTER_LOG_LEVEL='" + std::string(s) +
             "' is not a log level: set it to error, warning, notice, info or debug, or unset it";
  }
  return "";
}

}  // namespace muster::cli
