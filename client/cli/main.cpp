// `muster`: the command line of muster (run, launch, status, gpu, keygen).
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/flag_parser.hpp"
#include "cli/preflight.hpp"
#include "cli/run_flags.hpp"
#include "lib/gpu_libs.hpp"
#include "muster_config.h"

namespace {

using muster::cli::Flag;
using muster::cli::FlagParser;

// The subcommands, once: for the usage, the dispatch, "did you mean" and the
// manual (--dump-options).
struct Command {
  const char* name;
  const char* summary;
  int (*main)(const std::vector<std::string>&);
};
const Command kCommands[] = {
    {"run", "launch N workers of a program with torchrun's environment (drop-in for torchrun)",
     muster::cli::run_main},
    {"launch", "the same, passing --local_rank=N like torch.distributed.launch",
     muster::cli::launch_main},
    {"status", "show the node daemon's GPUs, leases and jobs", muster::cli::status_main},
    {"gpu", "drain or undrain a GPU (root): 'muster gpu drain N --reason TEXT'",
     muster::cli::gpu_main},
    {"keygen", "make a CURVE key pair for peering between daemons (multi-node jobs)",
     muster::cli::keygen_main},
    {"slurm-hook", "record a Slurm job's GPUs for musterd (root, as slurmd's Prolog/Epilog)",
     muster::cli::slurm_hook_main},
};

// muster's own flags (before a subcommand). --dump-options is hidden: the
// build makes the man page and the bash completion from what it prints.
std::vector<Flag> top_flags(bool& help, bool& version) {
  auto on = [](bool& to) {
    return [&to](const std::string& v) { to = muster::cli::switch_value(v); };
  };
  return {{"help", 'h', "", "this help ('muster COMMAND --help' for a command's)", on(help)},
          {"version", 'V', "", "print the version", on(version)}};
}

std::string usage() {
  bool help = false, version = false;
  std::string s = "Usage: muster COMMAND [ARGS...]\n\nCommands:\n";
  for (const auto& c : kCommands)
    s += "  " + std::string(c.name) + std::string(12 - std::string(c.name).size(), ' ') +
         c.summary + "\n";
  return s + "\nOptions:\n" + FlagParser(top_flags(help, version)).help();
}

// Every subcommand and every flag of every parser of the command.
void dump_options() {
  bool b = false, b2 = false, b3 = false;
  std::string text;
  for (const auto& c : kCommands) std::cout << "command\t" << c.name << "\t" << c.summary << "\n";
  std::cout << FlagParser(top_flags(b, b2)).dump("muster");
  muster::cli::RunOptions o;
  muster::cli::RawOptions raw;
  muster::cli::StatusOptions status;
  std::cout << FlagParser(muster::cli::run_flags(o, raw)).dump("run")
            << FlagParser(muster::cli::run_flags(o, raw)).dump("launch")
            << FlagParser(muster::cli::status_flags(status)).dump("status")
            << FlagParser(muster::cli::keygen_flags(b, text, b2, b3)).dump("keygen")
            << FlagParser(muster::cli::gpu_flags(b, text, b2, text)).dump("gpu")
            << FlagParser(muster::cli::slurm_hook_flags(b, text)).dump("slurm-hook");
  // The verbs of `muster gpu VERB`: `verb COMMAND VERB SYNOPSIS SUMMARY`.
  for (const auto& v : muster::cli::kGpuVerbs)
    std::cout << "verb\tgpu\t" << v.name << "\t" << v.synopsis << "\t" << v.summary << "\n";
  for (const auto& v : muster::cli::kSlurmHookVerbs)
    std::cout << "verb\tslurm-hook\t" << v.name << "\t" << v.synopsis << "\t" << v.summary << "\n";
}

}  // namespace

namespace muster::cli {

bool parse_plain(const char* command, const FlagParser& table, const std::vector<std::string>& args,
                 std::vector<std::string>* positionals) {
  try {
    size_t at = table.parse(args, {}, positionals);
    if (at < args.size()) throw FlagError("unrecognized argument '" + args[at] + "'");
    return true;
  } catch (const FlagError& e) {
    std::string who = *command ? "muster " + std::string(command) : "muster";
    std::cerr << who << ": " << e.what() << "\nTry '" << who << " --help'.\n";
    return false;
  }
}

}  // namespace muster::cli

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << usage();
    return 2;
  }
  std::string cmd = argv[1];
  std::vector<std::string> rest(argv + 2, argv + argc);
  if (cmd == "--dump-options") {
    dump_options();
    return 0;
  }
  std::vector<std::string> names{"help"};
  for (const auto& c : kCommands) {
    names.push_back(c.name);
    if (cmd != c.name) continue;
    // A variable muster cannot use is a usage error before anything starts.
    if (auto why = muster::cli::bad_environment(); !why.empty() && cmd != "keygen") {
      std::cerr << "muster " << cmd << ": " << why << "\n";
      return 2;
    }
    return c.main(rest);
  }
  if (cmd == "help") {
    std::cout << usage();
    return 0;
  }
  if (cmd.rfind("-", 0) == 0) {
    bool help = false, version = false;
    if (!muster::cli::parse_plain("", FlagParser(top_flags(help, version)), {cmd})) return 2;
    // NCCL is found at run time (lib/gpu_libs.hpp), so which one ranks would
    // use is only known by looking.
    if (version)
      std::cout << "muster " MUSTER_VERSION "\nNCCL: " << muster::detail::nccl_summary() << "\n";
    if (help) std::cout << usage();
    return 0;
  }
  std::cerr << "muster: unknown command '" << cmd << "'" << muster::cli::did_you_mean(cmd, names)
            << "\n\n"
            << usage();
  return 2;
}
