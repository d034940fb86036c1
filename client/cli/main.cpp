// `muster`: the command line of muster (run, launch, status, gpu, keygen).
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/flag_parser.hpp"
#include "muster_config.h"

namespace {
const char* kUsage =
    "Usage: muster COMMAND [ARGS...]\n\n"
    "Commands:\n"
    "  run      launch N workers of a program with torchrun's environment (drop-in for torchrun)\n"
    "  launch   the same, passing --local_rank=N like torch.distributed.launch\n"
    "  status   show the node daemon's GPUs, leases and jobs\n"
    "  gpu      drain or undrain a GPU (root): 'muster gpu drain N --reason TEXT'\n"
    "  keygen   make a CURVE key pair for peering between daemons (multi-node jobs)\n\n"
    "Options:\n"
    "  -h, --help     this help ('muster COMMAND --help' for a command's)\n"
    "  --version      print the version\n";
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  std::string cmd = argv[1];
  std::vector<std::string> rest(argv + 2, argv + argc);
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (cmd == "--version") {
    std::cout << "muster " MUSTER_VERSION "\n";
    return 0;
  }
  if (cmd == "run") return muster::cli::run_main(rest);
  if (cmd == "launch") return muster::cli::launch_main(rest);
  if (cmd == "status") return muster::cli::status_main(rest);
  if (cmd == "keygen") return muster::cli::keygen_main(rest);
  if (cmd == "gpu") return muster::cli::gpu_main(rest);
  std::string hint =
      muster::cli::closest(cmd, {"run", "launch", "status", "gpu", "keygen", "help"});
  std::cerr << "muster: unknown command '" << cmd << "'"
            << (hint.empty() ? "" : "; did you mean '" + hint + "'?") << "\n\n"
            << kUsage;
  return 2;
}
