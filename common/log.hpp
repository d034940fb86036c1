// One line per event on stderr, with sd-daemon(3) "<N>" level prefixes so the
// journal files each line at the right priority.
#pragma once

#include <string_view>

namespace muster::log {

enum class Level { kError = 3, kWarning = 4, kNotice = 5, kInfo = 6, kDebug = 7 };

void set_level(Level max);
bool parse_level(std::string_view name, Level& out);
void write(Level level, std::string_view line);

inline void error(std::string_view l) {
  write(Level::kError, l);
}
inline void warning(std::string_view l) {
  write(Level::kWarning, l);
}
inline void notice(std::string_view l) {
  write(Level::kNotice, l);
}
inline void info(std::string_view l) {
  write(Level::kInfo, l);
}
inline void debug(std::string_view l) {
  write(Level::kDebug, l);
}

}  // namespace muster::log
