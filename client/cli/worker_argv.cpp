#include "cli/worker_argv.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>

namespace muster::cli {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool is_python_interpreter(const std::string& program) {
  static const std::regex name("(python|pypy)[0-9.]*(d|m|u)?");
  auto slash = program.rfind('/');
  std::string base = slash == std::string::npos ? program : program.substr(slash + 1);
  return std::regex_match(base, name);
}

size_t local_rank_position(const std::vector<std::string>& argv) {
  if (argv.empty()) return 0;
  if (!is_python_interpreter(argv[0])) return 1;
  // Skip the interpreter's options up to the script (or -m MODULE, -c CMD).
  for (size_t i = 1; i < argv.size(); ++i) {
    const auto& a = argv[i];
    if (a == "-" || a.empty() || a[0] != '-') return i + 1;  // the script
    if (a == "--") return std::min(i + 2, argv.size());
    if (a[1] == '-') {  // --long option
      if (a == "--check-hash-based-pycs") ++i;
      continue;
    }
    // A cluster of one-letter flags ("-u", "-um", "-Wignore", "-mpkg.mod").
    for (size_t k = 1; k < a.size(); ++k) {
      char c = a[k];
      if (c != 'm' && c != 'c' && c != 'W' && c != 'X') continue;
      bool value_here = k + 1 < a.size();
      if (c == 'm' || c == 'c') return value_here ? i + 1 : std::min(i + 2, argv.size());
      if (!value_here) ++i;  // -W ARG, -X OPT
      break;
    }
  }
  return argv.size();
}

namespace {

// A file that cannot be executed but can be read: torchrun runs every
// PROGRAM with Python (without --no-python), so a script named `train`
// runs; an executable (a binary, a script with #!) runs as it is.
bool readable_not_executable(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), R_OK) == 0 &&
         access(path.c_str(), X_OK) != 0;
}

}  // namespace

std::vector<std::string> worker_argv(const RunOptions& o, uint32_t local_rank) {
  std::vector<std::string> argv;
  bool python =
      o.run_path || o.module ||
      (!o.no_python && (ends_with(o.program, ".py") || readable_not_executable(o.program)));
  if (python) {
    const char* py = std::getenv("MUSTER_PYTHON");
    argv = {py && *py ? py : "python3", "-u"};
    if (o.module && !o.run_path) argv.push_back("-m");
  }
  argv.push_back(o.program);
  argv.insert(argv.end(), o.args.begin(), o.args.end());
  if (o.launch_style && !o.use_env) {
    auto at = local_rank_position(argv);
    argv.insert(argv.begin() + static_cast<long>(at), "--local_rank=" + std::to_string(local_rank));
  }
  return argv;
}

std::string program_problem(const RunOptions& o) {
  if (o.no_python || o.run_path || o.module || ends_with(o.program, ".py") ||
      !readable_not_executable(o.program))
    return "";
  std::ifstream in(o.program);
  std::string first;
  std::getline(in, first);
  if (first.rfind("#!", 0) != 0 || first.find("python") != std::string::npos) return "";
  std::string interpreter = first.substr(2);
  interpreter.erase(0, interpreter.find_first_not_of(" \t"));
  interpreter = interpreter.substr(0, interpreter.find_first_of(" \t"));
  return o.program + " is a script for " + interpreter +
         " (#!) but not executable, so it would run with Python: make it executable (chmod +x " +
         o.program + "), or run it as 'muster run --no-python " + interpreter + " " + o.program +
         "'";
}

}  // namespace muster::cli
