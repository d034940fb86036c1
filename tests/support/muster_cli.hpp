// Test support: command lines of the `muster` program, run against an
// embedded daemon in a private runtime directory.
#pragma once

#include <unistd.h>

#include <chrono>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "support/process.hpp"

namespace muster::test {

// Environment for a `muster run` that starts its own embedded daemon in
// runtime_dir (no node daemon is asked).
inline std::map<std::string, std::string> embedded_env(const std::string& runtime_dir) {
  return {{"MUSTER_RUNTIME_DIR", runtime_dir}, {"MUSTER_ENDPOINT", ""}};
}

// `muster SUBCOMMAND ARGS...`.
inline std::vector<std::string> muster_cmd(const std::string& subcommand,
                                           std::vector<std::string> args) {
  args.insert(args.begin(), {program("MUSTER_TEST_MUSTER"), subcommand});
  return args;
}

// What a `muster run` printed (stdout and stderr together) and its exit code.
struct RunOutput {
  std::string text;
  int code = -1;
};

// `muster run ARGS...` on an embedded daemon in a fresh runtime directory,
// with `env` added; waits for it to end (an upper bound, not a speed check).
inline RunOutput run_embedded(const std::vector<std::string>& args,
                              const std::map<std::string, std::string>& env = {}) {
  using namespace std::chrono_literals;
  TempDir dir;
  auto full = embedded_env(dir.path());
  full.insert(env.begin(), env.end());
  Process p(muster_cmd("run", args), full, true);
  RunOutput r;
  r.text = p.read_all(40s);
  r.code = p.wait(10s).value_or(-1);
  return r;
}

// The Python some launcher tests run as a plain program (argv printing, a
// failing import); "" where the machine has none (those tests then only warn).
inline std::string system_python() {
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "";
}

// Workers' lines come as `[rankN]: LINE`; LINE alone.
inline std::string unprefixed(const std::string& line) {
  static const std::regex prefix("^\\[rank\\d+\\]: ");
  return std::regex_replace(line, prefix, "", std::regex_constants::format_first_only);
}

// The first n lines of p (each within 10 s), each a pid its workers
// printed, rank prefixes cut; fewer when p ends or is silent.
inline std::vector<pid_t> read_pids(Process& p, size_t n) {
  std::vector<pid_t> pids;
  while (pids.size() < n) {
    auto line = p.read_line(std::chrono::seconds(10));
    if (!line) break;
    pids.push_back(std::stoi(unprefixed(*line)));
  }
  return pids;
}

}  // namespace muster::test
