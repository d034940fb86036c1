#include "log.hpp"

#include "log_limit.hpp"

#include <unistd.h>

#include <atomic>
#include <string>

#include "escape.hpp"

namespace muster::log {

namespace {
std::atomic<int> g_max{static_cast<int>(Level::kInfo)};
std::atomic<Sink> g_sink{nullptr};

void to_stderr(Level level, std::string_view line) {
  // A terminal's reader wants no "<6>"; the journal and syslog want it.
  static const bool terminal = ::isatty(STDERR_FILENO) == 1;
  std::string s;
  if (!terminal) s = "<" + std::to_string(static_cast<int>(level)) + ">";
  s += "musterd: ";
  // User text (a key, a barrier name) inside the line must not end it or
  // start a forged one, nor reach a terminal as control sequences.
  s += escape(line);
  s.push_back('\n');
  // One write() per line keeps lines whole when several threads log.
  ssize_t r = ::write(STDERR_FILENO, s.data(), s.size());
  (void)r;
}
}  // namespace

void set_level(Level max) {
  g_max = static_cast<int>(max);
}

bool enabled(Level level) {
  return static_cast<int>(level) <= g_max;
}

void set_sink(Sink sink) {
  g_sink = sink;
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
  write(level, Fields{}, line);
}

namespace {
void emit(Level level, const Fields& fields, std::string_view line) {
  if (Sink s = g_sink.load()) return s(level, line, fields);
  to_stderr(level, line);
}
}  // namespace

void write_unlimited(Level level, std::string_view line) {
  if (static_cast<int>(level) > g_max) return;
  emit(level, Fields{}, line);
}

void write(Level level, const Fields& fields, std::string_view line) {
  if (static_cast<int>(level) > g_max) return;
  // Past its kind's rate (log_limit.hpp) a line is counted, not written.
  std::vector<std::string> summaries;
  bool allowed = rate_allows(level, line, fields, summaries);
  for (const auto& s : summaries) emit(Level::kNotice, Fields{}, s);
  if (allowed) emit(level, fields, line);
}

std::vector<std::string> journal_fields(Level level, std::string_view line, const Fields& f) {
  std::vector<std::string> v;
  // Escaped, each field stays one field: no text can start another field
  // or, in the file sink, another entry (a blank line).
  v.push_back("MESSAGE=" + escape(line));
  v.push_back("PRIORITY=" + std::to_string(static_cast<int>(level)));
  v.push_back("SYSLOG_IDENTIFIER=musterd");
  if (!f.job.empty()) v.push_back("JOB=" + escape(f.job));
  if (f.rank >= 0) v.push_back("RANK=" + std::to_string(f.rank));
  if (f.gpu >= 0) v.push_back("GPU=" + std::to_string(f.gpu));
  if (!f.peer.empty()) v.push_back("PEER=" + escape(f.peer));
  return v;
}

}  // namespace muster::log
