// The table of `muster run`'s flags: torchrun's (torch 1.13, with both
// spellings, and the newer ones users type) and muster's own.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "cli/flag_parser.hpp"
#include "cli/run_options.hpp"

namespace muster::cli {

// Values kept as given until they are checked together.
struct RawOptions {
  bool help = false;
  std::string devices;
  std::string nnodes = "1";
  std::string rdzv_conf;
  bool no_prefix = false;
  // The flags given, on the command line or as PET_ variables.
  std::set<std::string> given;
};

std::vector<Flag> run_flags(RunOptions& o, RawOptions& raw);

// A whole-string number, as argparse's int() and float() take them.
int64_t int_value(const std::string& s);
double float_value(const std::string& s);

}  // namespace muster::cli
