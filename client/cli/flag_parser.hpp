// The launchers' command-line parser, argparse's rules as torchrun users
// know them: `--flag VALUE` and `--flag=VALUE`, `-n 2`, `-n2`, both
// spellings of a long flag (`--nproc-per-node`, `--nproc_per_node`), a
// unique prefix of a flag for the flag, PET_<FLAG> environment variables as
// defaults, and parsing that stops at the program (everything after it is
// the program's). Errors are FlagError (usage, exit 2).
#pragma once

#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace muster::cli {

struct FlagError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Flag {
  std::string name;  // long name with dashes ("nproc-per-node"); the _ spelling is implied
  char short_name = 0;
  std::string metavar;  // empty: a switch (no value)
  std::string help;
  // Gets the value ("1" for a switch on the command line; a PET_ variable's
  // value as it is). Throws FlagError or std::invalid_argument on a bad one.
  std::function<void(const std::string&)> set;
  std::vector<std::string> aliases{};  // more long names (each with both spellings)
  bool hidden = false;                 // not in --help (an alias kept for old command lines)
};

class FlagParser {
 public:
  explicit FlagParser(std::vector<Flag> flags) : flags_(std::move(flags)) {}

  // Applies PET_<NAME> variables of env (torchrun's defaults from the
  // environment, as Kubeflow's PyTorchJob sets them), then args up to the
  // program. Returns the program's index (args.size(): none given).
  // With positionals, a word that is no flag does not end the parse: it
  // goes to positionals (as do all words after `--`), and flags may stand
  // before, between and after them (`muster gpu drain 0 --reason TEXT`).
  size_t parse(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
               std::vector<std::string>* positionals = nullptr) const;
  // The flags and their help, two columns.
  std::string help() const;
  // Every flag, hidden ones too, as `flag COMMAND SPELLINGS SHORT METAVAR
  // HELP` lines (tab-separated; SPELLINGS comma-separated, the main one
  // first): what scripts/gen_manuals.py makes the man page and the bash
  // completion of.
  std::string dump(const std::string& command) const;
  // PET_NPROC_PER_NODE for "nproc-per-node".
  static std::string env_name(const std::string& name);

 private:
  const Flag& find_long(const std::string& name) const;
  const Flag& find_short(char c) const;
  void apply(const Flag& f, const std::string& shown, const std::string& value) const;

  std::vector<Flag> flags_;
};

// A switch's value from a PET_ variable or the command line: 1/0, true/false.
bool switch_value(const std::string& value);

// The closest of candidates to word, or "" when none is close.
std::string closest(const std::string& word, const std::vector<std::string>& candidates);
// "; did you mean 'X'?" with the closest of candidates, or "": the end of
// an "unknown command"/"unrecognized option" error.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

// The process's environment as a map.
std::map<std::string, std::string> environment();

}  // namespace muster::cli
