// `muster status --watch`: the status again and again, like watch(1) or
// top on a terminal, one snapshot after another in a pipe, until SIGINT
// or SIGTERM ends it with exit code 0 and the terminal as it was.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>

#include "cli/status_view.hpp"

namespace muster::cli {

namespace {

// The cursor hidden while watching; shown again, colors off, at the end
// (the last snapshot stays on the screen, as does an error said on stderr).
constexpr const char* kEnterScreen = "\x1b[?25l";
constexpr const char* kLeaveScreen = "\x1b[0m\x1b[?25h";
// Cursor home, then clear the screen: each snapshot replaces the last.
constexpr const char* kRedraw = "\x1b[H\x1b[2J";

std::string clock_now() {
  char buf[32];
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

}  // namespace

int status_watch(const StatusOptions& o, double interval_s) {
  // The signals wait in sigtimedwait between snapshots: no handler runs in
  // the middle of a write, and the terminal is put back on the way out.
  sigset_t stop, old;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &stop, &old);
  const bool tty = !o.json && ::isatty(STDOUT_FILENO);
  if (tty) std::fputs(kEnterScreen, stdout);
  int rc = 0;
  for (bool first = true;; first = false) {
    if (tty)
      std::printf("%sEvery %gs: muster status%s%s    %s\n\n", kRedraw, interval_s,
                  o.job.empty() ? "" : " --job ", o.job.c_str(), clock_now().c_str());
    else if (!o.json)
      std::printf("%s--- muster status at %s (every %g s) ---\n", first ? "" : "\n",
                  clock_now().c_str(), interval_s);
    std::fflush(stdout);
    // A daemon that is away is retried at the next snapshot; an unknown
    // job at the first one is a usage error.
    if (status_once(o) == 2 && first) {
      rc = 2;
      break;
    }
    double whole = std::floor(interval_s);
    timespec wait{static_cast<time_t>(whole), static_cast<long>((interval_s - whole) * 1e9)};
    int sig = ::sigtimedwait(&stop, nullptr, &wait);
    if (sig == SIGINT || sig == SIGTERM) break;
  }
  if (tty) std::fputs(kLeaveScreen, stdout);
  std::fflush(stdout);
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
  return rc;
}

}  // namespace muster::cli
