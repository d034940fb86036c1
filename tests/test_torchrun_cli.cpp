// torchrun's command lines with `torchrun` replaced by `muster run`, and
// argparse's answers to typos, ambiguous prefixes and bad values.
#include <catch2/catch.hpp>

#include <set>

#include "support/muster_cli.hpp"
#include "support/process.hpp"

using namespace std::chrono_literals;
using muster::test::Process;
namespace test = muster::test;

namespace {

const std::string kPython = "/usr/bin/python3";
// A torchrun program: its rank, world, a few variables and its arguments.
const std::string kProgram =
    "import os, sys\n"
    "e = os.environ\n"
    "print(e['RANK'], e['WORLD_SIZE'], e['TORCHELASTIC_RUN_ID'], e['MASTER_ADDR'],\n"
    "      e['MASTER_PORT'], sys.argv[1:])\n";

struct Ran {
  std::set<std::string> lines;
  std::string text;  // everything, stderr too
  int code = -1;
};

// `muster ARGS` (a torchrun command line with its first word replaced) in
// dir, with prog.py and the module prog_mod there.
Ran invoke(const test::TempDir& dir, const std::vector<std::string>& args,
           std::map<std::string, std::string> env = {}) {
  test::spit(dir.path() + "/prog.py", kProgram);
  test::spit(dir.path() + "/prog_mod.py", kProgram);
  test::spit(dir.path() + "/prog", kProgram);
  auto full = test::embedded_env(dir.path() + "/rt");
  full["MUSTER_PYTHON"] = kPython;
  full["PYTHONPATH"] = dir.path();
  full.insert(env.begin(), env.end());
  std::vector<std::string> argv = args;
  argv.insert(argv.begin(), test::program("MUSTER_TEST_MUSTER"));
  Process p(argv, full, true);
  Ran r;
  while (auto line = p.read_line(30s)) {
    r.text += *line + "\n";
    if (line->rfind("[rank", 0) == 0) r.lines.insert(*line);
  }
  r.code = p.wait(10s).value_or(-1);
  return r;
}

}  // namespace

TEST_CASE("torchrun command lines run with torchrun replaced by muster run") {
  if (test::system_python().empty()) {
    WARN("no /usr/bin/python3: not checked");
    return;
  }
  test::TempDir dir;
  auto prog = dir.path() + "/prog.py";
  SECTION("--standalone --nproc_per_node=2 prog.py --lr 0.1") {
    auto r = invoke(dir, {"run", "--standalone", "--nproc_per_node=2", prog, "--lr", "0.1"});
    CHECK(r.code == 0);
    REQUIRE(r.lines.size() == 2);
    CHECK_THAT(*r.lines.begin(), Catch::StartsWith("[rank0]: 0 2 "));
    CHECK_THAT(*r.lines.begin(), Catch::EndsWith("['--lr', '0.1']"));
  }
  SECTION("c10d rendezvous flags on one node, both spellings, torchrun's accepted-only flags") {
    auto r = invoke(
        dir, {"run", "--nnodes=1", "--nproc-per-node", "2", "--rdzv_backend=c10d",
              "--rdzv-endpoint=localhost:29400", "--rdzv_id", "job7", "--rdzv-conf",
              "join_timeout=30,last_call_timeout=1,read_timeout=60", "--max_restarts=0", "--role",
              "trainer", "--monitor_interval", "0.5", "--start-method", "fork", prog, "x"});
    CHECK(r.code == 0);
    CHECK(r.lines.size() == 2);
    CHECK_THAT(r.text, Catch::Contains("[rank1]: 1 2 job7 127.0.0.1 "));
    CHECK_THAT(r.text, Catch::Contains("--rdzv-conf read_timeout has no meaning here"));
  }
  SECTION("static master address, port and node rank") {
    auto r =
        invoke(dir, {"run", "--nproc_per_node", "2", "--rdzv_backend", "static", "--master_addr",
                     "127.0.0.2", "--master_port", "29555", "--node_rank", "0", prog});
    CHECK(r.code == 0);
    CHECK_THAT(r.text, Catch::Contains("[rank0]: 0 2 "));
    CHECK_THAT(r.text, Catch::Contains(" 127.0.0.2 29555 []"));
  }
  SECTION("unique prefixes of flags, as argparse takes them; -m runs a module") {
    auto r = invoke(dir, {"run", "--nproc", "2", "--rdzv_i=abbrev", "-m", "prog_mod", "--lr", "1"});
    CHECK(r.code == 0);
    CHECK(r.lines.size() == 2);
    CHECK_THAT(r.text, Catch::Contains("[rank0]: 0 2 abbrev "));
    CHECK_THAT(r.text, Catch::Contains("['--lr', '1']"));
    // --standalone (here its prefix) makes a new id, as torchrun does: two
    // standalone runs never meet.
    auto alone = invoke(dir, {"run", "--stand", "--rdzv_i=abbrev", "-m", "prog_mod"});
    CHECK(alone.code == 0);
    CHECK_THAT(alone.text, Catch::Contains("[rank0]: 0 1 job-"));
  }
  SECTION("--no_python runs the program itself, --run_path with python whatever its name") {
    auto direct = invoke(dir, {"run", "--no_python", "--nproc_per_node=2", "/bin/echo", "hi"});
    CHECK(direct.code == 0);
    CHECK(direct.lines == std::set<std::string>{"[rank0]: hi", "[rank1]: hi"});
    auto run_path = invoke(dir, {"run", "--run_path", dir.path() + "/prog", "y"});
    CHECK(run_path.code == 0);
    CHECK_THAT(run_path.text, Catch::Contains("[rank0]: 0 1 "));
  }
  SECTION("a script named without .py runs with Python, as torchrun runs every PROGRAM") {
    // Not executable: torchrun runs it with its Python, and so does muster
    // (an executable one runs as it is). Newer torchrun's default signal
    // list is accepted: muster handles those.
    auto r = invoke(dir, {"run", "--signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
                          dir.path() + "/prog", "z"});
    CHECK(r.code == 0);
    CHECK_THAT(r.text, Catch::Contains("[rank0]: 0 1 "));
    CHECK_THAT(r.text, Catch::Contains("['z']"));
  }
  SECTION("PET_ variables are defaults; the command line wins") {
    std::map<std::string, std::string> pet{
        {"PET_NPROC_PER_NODE", "3"}, {"PET_RDZV_ID", "petjob"}, {"PET_RDZV_BACKEND", "static"}};
    auto r = invoke(dir, {"run", prog}, pet);
    CHECK(r.code == 0);
    CHECK(r.lines.size() == 3);
    CHECK_THAT(r.text, Catch::Contains("[rank2]: 2 3 petjob "));
    auto over = invoke(dir, {"run", "--nproc_per_node=1", prog}, pet);
    CHECK(over.code == 0);
    CHECK(over.lines.size() == 1);
  }
  SECTION("--nproc-per-node gpu and auto count the GPUs the job may lease, cpu the CPUs") {
    auto gpu = invoke(dir, {"run", "--simulate-gpus", "3", "--nproc-per-node", "gpu", prog});
    CHECK(gpu.code == 0);
    CHECK(gpu.lines.size() == 3);
    auto some = invoke(
        dir, {"run", "--simulate-gpus", "3", "--devices", "0,2", "--nproc-per-node", "auto", prog});
    CHECK(some.code == 0);
    CHECK(some.lines.size() == 2);
    auto cpu = invoke(dir, {"run", "--simulate-gpus", "3", "--nproc-per-node", "cpu", prog});
    CHECK(cpu.code == 0);
    CHECK_THAT(cpu.text, Catch::Contains("--nproc-per-node cpu: "));
    CHECK(cpu.lines.size() >= 1);
  }
}

TEST_CASE("usage errors exit 2 at once with argparse's words") {
  test::TempDir dir;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run", "--nproc-per-nodes", "2", "/bin/true"},
       "unrecognized option '--nproc-per-nodes'; did you mean '--nproc-per-node'?"},
      {{"run", "--standalon=1", "/bin/true"}, "ignored explicit argument '1'"},
      {{"run", "--r", "2", "/bin/true"}, "ambiguous option: --r could match"},
      {{"run", "--master", "x", "/bin/true"},
       "ambiguous option: --master could match --master-addr, --master-port"},
      {{"run", "--rdzv-backend", "etcd", "/bin/true"}, "muster has no etcd rendezvous"},
      {{"run", "--rdzv-backend", "zk", "/bin/true"}, "invalid choice 'zk'"},
      {{"run", "--start_method", "thread", "/bin/true"}, "invalid choice 'thread'"},
      {{"run", "--nproc_per_node", "many", "/bin/true"}, "a number, gpu, cpu or auto"},
      {{"run", "--standalone", "--nnodes", "2", "/bin/true"}, "contradicts it"},
      {{"run", "--nnodes", "2", "--rdzv-id", "j", "--rdzv-endpoint", "h:x", "/bin/true"},
       "must be HOST:PORT"},
      {{"run", "--nnodes", "2", "--rdzv-id", "j", "--rdzv-endpoint", "http://h:29400", "/bin/true"},
       "must be HOST:PORT, got 'http://h:29400'"},
      {{"run", "--nnodes", "2", "--rdzv-id", "j", "--rdzv-endpoint", "a b", "/bin/true"},
       "must be HOST:PORT"},
      {{"run", "--local-ranks-filter", "0", "/bin/true"}, "prefixed [rankN]:"},
      {{"run", "--virtual-local-rank", "/bin/true"}, "its own GPU lease"},
      {{"run", "--event-log-handler", "x", "/bin/true"}, "events plugin"},
      {{"run", "--signals-to-handle", "SIGTERM,SIGUSR1", "/bin/true"}, "cannot handle 'SIGUSR1'"},
      {{"run", "--logs_specs", "x", "/bin/true"}, "LogsSpecs plugin"},
      {{"run", "-m", "--no-python", "x"}, "contradict each other"},
      {{"run", "--nproc_per_node"}, "argument --nproc-per-node: expected one argument"},
      {{"launch", "--max_restarts=-1", "/bin/true"}, "must be between 0 and 1000"},
      {{"rnu", "/bin/true"}, "unknown command 'rnu'; did you mean 'run'?"},
      // One parser for every part of the command: the subcommands without
      // a program and muster's own flags say "did you mean" too.
      {{"status", "--jsn"}, "muster status: unrecognized option '--jsn'; did you mean '--json'?"},
      {{"status", "stray"}, "muster status: unrecognized argument 'stray'"},
      {{"keygen", "--frce"},
       "muster keygen: unrecognized option '--frce'; did you mean '--force'?"},
      {{"--vresion", "x"}, "muster: unrecognized option '--vresion'; did you mean '--version'?"},
      {{"run", "-r", "4", "/bin/true"}, "--redirects: '4' is not 0, 1, 2, 3"},
      {{"run", "--tee", "0:1,x:2", "/bin/true"}, "--tee: '0:1,x:2' is not"},
  };
  for (const auto& [args, words] : cases) {
    INFO(args[1]);
    auto r = invoke(dir, args);
    CHECK(r.code == 2);
    CHECK_THAT(r.text, Catch::Contains(words));
  }
  auto pet = invoke(dir, {"run", "/bin/true"}, {{"PET_NNODES", "two"}});
  CHECK(pet.code == 2);
  CHECK_THAT(pet.text, Catch::Contains("PET_NNODES"));
}

// torchrun waits 30 s between SIGTERM and SIGKILL (PContext.close's
// timeout in torch 1.13) before it logs the kill; so does muster run unless
// --grace-period says otherwise.
TEST_CASE("muster run's SIGTERM grace is torchrun's 30 s by default") {
  test::TempDir dir;
  auto r = invoke(dir, {"run", "--help"});
  CHECK(r.code == 0);
  std::string flat;  // the help's words, wrapping undone
  for (char c : r.text) {
    if (c == '\n') c = ' ';
    if (c != ' ' || (!flat.empty() && flat.back() != ' ')) flat += c;
  }
  CHECK_THAT(flat, Catch::Contains("--grace-period SECONDS"));
  CHECK_THAT(flat, Catch::Contains("seconds between SIGTERM and SIGKILL when stopping workers "
                                   "(default 30)"));
}
