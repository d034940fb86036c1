// musterd's options: the command line and an optional config file with the
// same names (Boost.Program_options).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/server.hpp"

namespace muster::daemon {

struct Options {
  Config config;
  std::string log_level = "info";
};

// Returns nullopt after printing --help/--version (exit 0). Throws
// std::runtime_error with a one-line reason for bad options (exit 2).
std::optional<Options> parse_options(int argc, char** argv);

}  // namespace muster::daemon
