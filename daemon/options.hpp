// musterd's options: the command line and a config file with the same names
// (Boost.Program_options), /etc/muster/musterd.conf by default.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/config.hpp"

namespace muster::daemon {

// Read when it exists and neither --config nor --no-config says otherwise.
inline constexpr const char* kDefaultConfigFile = "/etc/muster/musterd.conf";

struct Options {
  Config config;
  std::string log_level = "info";
  std::string config_file;  // the file read, empty when none
  // --check-config: validate, print check_summary, exit 0.
  bool check_only = false;
  std::string check_summary;
};

// Returns nullopt after printing --help/--version (exit 0). Throws
// std::runtime_error with a one-line reason for bad options (exit 2); a bad
// config file line names the file, the line number and the key.
std::optional<Options> parse_options(int argc, char** argv);

}  // namespace muster::daemon
