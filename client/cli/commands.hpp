#pragma once

#include <string>
#include <vector>

#include "cli/flag_parser.hpp"
#include "cli/status_view.hpp"

namespace muster::cli {

// The flag tables of the subcommands that have no program after them.
std::vector<Flag> status_flags(StatusOptions& o);
std::vector<Flag> keygen_flags(bool& help, std::string& out, bool& out_given, bool& force);
std::vector<Flag> gpu_flags(bool& help, std::string& reason, bool& reason_given,
                            std::string& owner);
std::vector<Flag> slurm_hook_flags(bool& help, std::string& dir);

// The commands of `muster gpu` (its first positional): for the parse, its
// "did you mean", the manual and the bash completion.
struct Verb {
  const char* name;
  const char* synopsis;  // what follows the verb ("N --reason TEXT")
  const char* summary;
};
inline constexpr Verb kGpuVerbs[] = {
    {"list", "[--owner USER|UID]",
     "the GPUs and who holds them, as muster status shows them; --owner: only the GPUs that "
     "user's jobs hold (each user's job names are their own)"},
    {"drain", "N --reason TEXT",
     "GPU N is given to nobody from now on; a rank that holds it keeps it until the rank ends"},
    {"undrain", "N",
     "GPU N may be leased again; this also clears a critical XID's quarantine (once the GPU was "
     "reset)"},
};

// The commands of `muster slurm-hook`: what slurmd runs as Prolog and Epilog.
inline constexpr Verb kSlurmHookVerbs[] = {
    {"prolog", "",
     "records the job's uid and GPUs on this node (SLURM_JOB_ID, SLURM_JOB_UID, "
     "SLURM_JOB_GPUS) for musterd's slurm-gpus = verified"},
    {"epilog", "", "removes the job's record"},
};

// Parses a subcommand's flags with `table` (no PET_ variables, no program
// after them). False after printing the usage error (exit 2). With
// positionals, the words that are no flags go there (anywhere among the
// flags) instead of being an error.
bool parse_plain(const char* command, const FlagParser& table, const std::vector<std::string>& args,
                 std::vector<std::string>* positionals = nullptr);

int run_main(const std::vector<std::string>& args);
// `muster run` that appends --local_rank=N (torch.distributed.launch).
int launch_main(const std::vector<std::string>& args);
int status_main(const std::vector<std::string>& args);
int keygen_main(const std::vector<std::string>& args);
// `muster gpu drain|undrain N` (root).
int gpu_main(const std::vector<std::string>& args);
// `muster slurm-hook prolog|epilog` (root, from slurmd).
int slurm_hook_main(const std::vector<std::string>& args);

}  // namespace muster::cli
