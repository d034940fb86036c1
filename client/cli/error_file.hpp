// The error file a rank's torch `@record` writes (TORCHELASTIC_ERROR_FILE):
// {"message": {"message": "ValueError: ...", "extraInfo": {"py_callstack":
// "Traceback ...", "timestamp": "1700000000"}}}, or a plain string message
// (torch's newer format).
#pragma once

#include <ctime>
#include <string>

namespace muster::cli {

struct RankError {
  bool found = false;     // the file exists and is torch's JSON
  std::string message;    // "ValueError: boom"
  std::string where;      // the innermost frame: `File "train.py", line 12, in step`
  std::string callstack;  // the whole traceback, as Python printed it
  std::time_t time = 0;   // when it was raised (0: unknown)
};

RankError read_error_file(const std::string& path);

// "2026-12-01 21:20:05" (local time).
std::string format_time(std::time_t t);

}  // namespace muster::cli
