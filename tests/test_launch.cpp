// `muster run` as torchrun and `muster launch` as torch.distributed.launch:
// what lands on the workers' command lines.
#include <catch2/catch.hpp>

#include <set>

#include "support/muster_cli.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::Process;

namespace {

// The lines a job's workers printed (with their `[rankN]: ` prefixes), and
// its exit code.
struct Ran {
  std::set<std::string> lines;
  int code = -1;
};

Ran run(const std::string& subcommand, const std::vector<std::string>& args,
        std::map<std::string, std::string> env = {}) {
  test::TempDir dir;
  auto full = test::embedded_env(dir.path());
  full.insert(env.begin(), env.end());
  Process p(test::muster_cmd(subcommand, args), full);
  Ran r;
  while (auto line = p.read_line(30s)) r.lines.insert(*line);
  r.code = p.wait(10s).value_or(-1);
  return r;
}

const std::string kPython = "/usr/bin/python3";
const std::string kPrintArgv = "import sys; print(sys.argv[1:])";

}  // namespace

TEST_CASE("muster run adds nothing to the program's arguments; --use-env is a no-op") {
  for (auto args : {std::vector<std::string>{"-n", "2", "/bin/echo", "arg"},
                    {"-n", "2", "--use-env", "/bin/echo", "arg"}}) {
    auto r = run("run", args);
    CHECK(r.code == 0);
    CHECK(r.lines == std::set<std::string>{"[rank0]: arg", "[rank1]: arg"});
  }
}

TEST_CASE("muster launch passes --local_rank=N right after the program, unless --use-env") {
  auto r = run("launch", {"-n", "2", "/bin/echo", "arg"});
  CHECK(r.code == 0);
  CHECK(r.lines ==
        std::set<std::string>{"[rank0]: --local_rank=0 arg", "[rank1]: --local_rank=1 arg"});
  auto env = run("launch", {"-n", "2", "--use-env", "/bin/echo", "arg"});
  CHECK(env.code == 0);
  CHECK(env.lines == std::set<std::string>{"[rank0]: arg", "[rank1]: arg"});
}

TEST_CASE("muster launch gives --local_rank to the script or module, never to the interpreter") {
  if (test::system_python().empty()) {
    WARN("no /usr/bin/python3: not checked");
    return;
  }
  test::TempDir dir;
  test::spit(dir.path() + "/argv_echo.py", kPrintArgv + "\n");
  std::map<std::string, std::string> env{{"PYTHONPATH", dir.path()}};
  const std::set<std::string> want{"[rank0]: ['--local_rank=0', 'x']",
                                   "[rank1]: ['--local_rank=1', 'x']"};
  for (auto args : {std::vector<std::string>{kPython, "-u", dir.path() + "/argv_echo.py", "x"},
                    {kPython, "-W", "ignore", "-m", "argv_echo", "x"},
                    {kPython, "-um", "argv_echo", "x"},
                    {kPython, "-B", "-c", kPrintArgv, "x"},
                    {kPython, "-X", "utf8", "-Wignore", "-c", kPrintArgv, "x"}}) {
    INFO(args[1] + " " + args[2]);
    args.insert(args.begin(), {"-n", "2"});
    auto r = run("launch", args, env);
    CHECK(r.code == 0);
    CHECK(r.lines == want);
  }
  // A .py PROGRAM runs with $MUSTER_PYTHON -u; the argument follows the script.
  auto py =
      run("launch", {"-n", "2", dir.path() + "/argv_echo.py", "x"}, {{"MUSTER_PYTHON", kPython}});
  CHECK(py.code == 0);
  CHECK(py.lines == want);
}
