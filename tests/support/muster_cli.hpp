// Test support: command lines of the `muster` program, run against an
// embedded daemon in a private runtime directory.
#pragma once

#include <unistd.h>

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

// The Python some launcher tests run as a plain program (argv printing, a
// failing import); "" where the machine has none (those tests then only warn).
inline std::string system_python() {
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "";
}

}  // namespace muster::test
