// Test support: command lines of the `muster` program, run against an
// embedded daemon in a private runtime directory.
#pragma once

#include <map>
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

}  // namespace muster::test
