// What `muster status` prints and how `--watch` repeats it.
#pragma once

#include <string>

#include "muster/status.hpp"

namespace muster::cli {

struct StatusOptions {
  bool help = false;
  bool json = false;
  bool topology = false;
  bool watch = false;
  std::string job;  // --job: that job only, its waits job-wide
  bool job_given = false;
  std::string owner;       // --owner USER|UID, as given
  int64_t owner_uid = -1;  // --owner: only the jobs of this uid (-1: all shown)
  std::string interval = "2";
  bool interval_given = false;
};

// The tables of a status (GPUs, jobs, their ranks and open waits) on
// stdout; color: stuck waits in bold red (a terminal only).
void print_table(const DaemonStatus& s, const std::string& endpoint, bool color);

// NO_COLOR set to anything but empty (no-color.org): no colors, whatever
// the terminal.
bool no_color();

// The status once (0), or the usage error's or the daemon's exit code
// (2: unknown job; 1: no daemon, other errors), with the message on stderr.
int status_once(const StatusOptions& o);

// `--watch`: the status every `interval_s` until SIGINT or SIGTERM (then
// 0). On a terminal each snapshot replaces the last (the screen cleared
// and the cursor homed, like watch(1)); in a pipe they follow one another,
// each under a separator line.
int status_watch(const StatusOptions& o, double interval_s);

}  // namespace muster::cli
