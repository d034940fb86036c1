// One line per event. By default on stderr, with sd-daemon(3) "<N>" level
// prefixes so the journal files each line at the right priority (none when
// stderr is a terminal: a person reads it). A sink set by the daemon
// (daemon/systemd/journal.hpp) sends lines to the journal instead, with
// the fields the call site knows (JOB=, RANK=, GPU=, PEER=) so that
// `journalctl -u musterd JOB=run42` finds a job's lines.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace muster::log {

enum class Level { kError = 3, kWarning = 4, kNotice = 5, kInfo = 6, kDebug = 7 };

// What a line is about, as far as its call site knows: empty or -1 = not
// known (the field is left out).
struct Fields {
  std::string_view job;
  int64_t rank = -1;
  int64_t gpu = -1;
  std::string_view peer;  // another daemon: a node id or host:port
};

// The fields of a line about a job (and one of its ranks and its GPU),
// about a GPU, or about a peer daemon.
inline Fields job(std::string_view id, int64_t rank = -1, int64_t gpu = -1) {
  Fields f;
  f.job = id;
  f.rank = rank;
  f.gpu = gpu;
  return f;
}
inline Fields gpu(int64_t index, std::string_view job = {}) {
  Fields f;
  f.gpu = index;
  f.job = job;
  return f;
}
inline Fields peer(std::string_view name, std::string_view job = {}) {
  Fields f;
  f.peer = name;
  f.job = job;
  return f;
}

void set_level(Level max);
// Whether a line of `level` is written (to skip building one that is not).
bool enabled(Level level);
bool parse_level(std::string_view name, Level& out);
void write(Level level, std::string_view line);
void write(Level level, const Fields& fields, std::string_view line);

// Where lines go; nullptr = stderr (the default). Called for lines at or
// under the level only; may be called from several threads.
using Sink = void (*)(Level level, std::string_view line, const Fields& fields);
void set_sink(Sink sink);

// The journal entry of a line, field by field ("MESSAGE=...",
// "PRIORITY=6", "SYSLOG_IDENTIFIER=musterd", then JOB=, RANK=, GPU=, PEER=
// for those known): what the journal sink hands sd_journal_sendv.
std::vector<std::string> journal_fields(Level level, std::string_view line, const Fields& fields);

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
inline void error(const Fields& f, std::string_view l) {
  write(Level::kError, f, l);
}
inline void warning(const Fields& f, std::string_view l) {
  write(Level::kWarning, f, l);
}
inline void notice(const Fields& f, std::string_view l) {
  write(Level::kNotice, f, l);
}
inline void info(const Fields& f, std::string_view l) {
  write(Level::kInfo, f, l);
}
inline void debug(const Fields& f, std::string_view l) {
  write(Level::kDebug, f, l);
}

}  // namespace muster::log
