// What `muster run` says after the job failed for good: the root cause
// first (as torchrun's ChildFailedError table: rank, exit code or signal,
// the exception its `@record` wrote, where it was raised, when), other
// ranks' recorded errors, then every attempt with the failing rank's last
// stderr lines.
#pragma once

#include <ctime>
#include <deque>
#include <string>
#include <vector>

#include "cli/run_options.hpp"
#include "cli/supervisor.hpp"

namespace muster::cli {

struct Failure {
  uint32_t attempt = 0;
  Outcome outcome;
  std::deque<std::string> tail;          // the failing rank's last stderr lines
  uint32_t rank_offset = 0;              // outcome.rank is local: global = offset + local
  std::vector<std::string> error_files;  // per local rank (empty: world changed)
  std::time_t when = 0;                  // when muster run saw the failure
};

// name: "muster run" or "muster launch"; files_kept: the error files stay
// (--log-dir), so their paths are worth printing.
void print_summary(const char* name, const std::vector<Failure>& failures, const RunOptions& o,
                   bool files_kept);

}  // namespace muster::cli
