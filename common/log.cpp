#include "log.hpp"

#include <unistd.h>

#include <atomic>
#include <string>

namespace muster::log {

namespace {
std::atomic<int> g_max{static_cast<int>(Level::kInfo)};
}

void set_level(Level max) {
  g_max = static_cast<int>(max);
}

bool parse_level(std::string_view name, Level& out) {
  if (name == "error")
    out = Level::kError;
  else if (name == "warning")
    out = Level::kWarning;
  else if (name == "notice")
    out = Level::kNotice;
  else if (name == "info")
    out = Level::kInfo;
  else if (name == "debug")
    out = Level::kDebug;
  else
    return false;
  return true;
}

void write(Level level, std::string_view line) {
  if (static_cast<int>(level) > g_max) return;
  std::string s = "<" + std::to_string(static_cast<int>(level)) + ">musterd: ";
  s.append(line);
  s.push_back('\n');
  // One write() per line keeps lines whole when several threads log.
  ssize_t r = ::write(STDERR_FILENO, s.data(), s.size());
  (void)r;
}

}  // namespace muster::log
