#include "cli/summary.hpp"

#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "cli/error_file.hpp"
#include "cli/worker_argv.hpp"
#include "escape.hpp"

namespace muster::cli {

namespace {

// PROGRAM as exec finds it on PATH (what a worker ran).
std::string on_path(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return program;
}

// A rank that could not import a module: which Python ran it, and how to
// pick another.
std::string module_hint(const RankError& e, const std::deque<std::string>& tail,
                        const RunOptions& o) {
  bool missing = e.message.rfind("ModuleNotFoundError", 0) == 0;
  // An import in the program: ModuleNotFoundError; python -m of a module
  // it cannot find: "/usr/bin/python3: No module named x".
  for (const auto& line : tail)
    missing = missing || line.find("ModuleNotFoundError") == 0 ||
              line.find(": No module named ") != std::string::npos;
  if (!missing) return "";
  std::string interpreter = on_path(worker_argv(o, 0).front());
  return "  hint      : the workers ran " + interpreter +
         "; if the module is installed for another Python, set MUSTER_PYTHON to it (e.g. "
         "MUSTER_PYTHON=/usr/bin/python3)\n";
}

std::string root_cause(const Failure& f, const RunOptions& o, bool files_kept) {
  auto local = static_cast<uint32_t>(f.outcome.rank);
  RankError e;
  std::string file = local < f.error_files.size() ? f.error_files[local] : "";
  if (!file.empty()) e = read_error_file(file);
  std::string s = "Root cause (first observed failure):\n";
  s += "  rank      : " + std::to_string(f.rank_offset + local) + " (local rank " +
       std::to_string(local) + "), attempt " + std::to_string(f.attempt) + "\n";
  s += "  exit      : " + f.outcome.how + "\n";
  s += "  time      : " + format_time(e.time ? e.time : f.when) + "\n";
  if (e.found) {
    // A worker wrote the error file: its text is escaped before it reaches
    // the terminal or log of whoever runs the launcher.
    s += "  error     : " + escape(e.message) + "\n";
    if (!e.where.empty()) s += "  raised at : " + escape(e.where) + "\n";
    if (files_kept) s += "  error file: " + file + "\n";
  } else {
    s += "  error     : (no error file: the program did not record one; torch's @record "
         "writes it)\n";
  }
  s += module_hint(e, f.tail, o);
  // Other ranks that recorded an error in the same attempt.
  for (uint32_t r = 0; r < f.error_files.size(); ++r) {
    if (r == local) continue;
    RankError other = read_error_file(f.error_files[r]);
    if (other.found)
      s += "  also rank " + std::to_string(f.rank_offset + r) + ": " + escape(other.message) +
           (other.where.empty() ? "" : " (" + escape(other.where) + ")") + "\n";
  }
  return s;
}

}  // namespace

void print_summary(const char* name, const std::vector<Failure>& failures, const RunOptions& o,
                   bool files_kept) {
  std::string s = std::string(name) + ": the job failed";
  if (o.max_restarts > 0)
    s += " in all " + std::to_string(failures.size()) + " attempt(s) (--max-restarts " +
         std::to_string(o.max_restarts) + ")";
  s += ":\n";
  if (!failures.empty() && failures.back().outcome.rank >= 0)
    s += root_cause(failures.back(), o, files_kept);
  s += "Attempts:\n";
  for (const auto& f : failures) {
    if (f.outcome.rank < 0) {  // stopped because the job's world changed
      s += "  attempt " + std::to_string(f.attempt) + ": " + f.outcome.world_changed + "\n";
      continue;
    }
    s += "  attempt " + std::to_string(f.attempt) + ": rank " + std::to_string(f.outcome.rank) +
         " " + f.outcome.how + "\n";
    if (f.tail.empty()) s += "    (no stderr output)\n";
    for (const auto& line : f.tail)
      s += "    [rank" + std::to_string(f.outcome.rank) + "]: " + line + "\n";
  }
  std::cerr << s << std::flush;
}

}  // namespace muster::cli
