#pragma once

#include <string>
#include <vector>

#include "cli/flag_parser.hpp"

namespace muster::cli {

// The flag tables of the subcommands that have no program after them.
std::vector<Flag> status_flags(bool& help, bool& json, bool& topology);
std::vector<Flag> keygen_flags(bool& help, std::string& out, bool& out_given, bool& force);
// Parses a subcommand's flags with `table` (no PET_ variables, no program
// after them). False after printing the usage error (exit 2).
bool parse_plain(const char* command, const FlagParser& table,
                 const std::vector<std::string>& args);

int run_main(const std::vector<std::string>& args);
// `muster run` that appends --local_rank=N (torch.distributed.launch).
int launch_main(const std::vector<std::string>& args);
int status_main(const std::vector<std::string>& args);
int keygen_main(const std::vector<std::string>& args);
// `muster gpu drain|undrain N` (root).
int gpu_main(const std::vector<std::string>& args);

}  // namespace muster::cli
