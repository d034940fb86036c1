// The worker environment torchrun gives (error files, role, NCCL error
// handling, no agent store), and what muster run says when a rank fails:
// the error its torch `@record` wrote, first.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <ctime>
#include <regex>

#include "support/muster_cli.hpp"
#include "support/process.hpp"

using namespace std::chrono_literals;
using muster::test::Process;
namespace test = muster::test;

namespace {

// What torch 1.13's ErrorHandler.record_exception writes.
std::string torch_error_json(const std::string& message, long timestamp) {
  return "{\"message\": {\"message\": \"" + message +
         "\", \"extraInfo\": {\"py_callstack\": \"Traceback (most recent call last):\\n  File "
         "\\\"/x/train.py\\\", line 40, in <module>\\n    main()\\n  File \\\"/x/train.py\\\", "
         "line 9, in main\\n    raise ValueError(\\\"boom\\\")\\n" +
         message + "\\n\", \"timestamp\": \"" + std::to_string(timestamp) + "\"}}}";
}

}  // namespace

TEST_CASE("workers get torchrun's error file per rank and attempt, role and NCCL settings") {
  // Rank 1 fails the first attempt, but only once rank 0 has printed its
  // line: stopping rank 0 before it ran its echo would lose that line.
  test::TempDir dir;
  std::string script =
      "echo \"$RANK $TORCHELASTIC_ERROR_FILE $ROLE_NAME $TORCH_NCCL_ASYNC_ERROR_HANDLING "
      "$NCCL_ASYNC_ERROR_HANDLING $TORCHELASTIC_USE_AGENT_STORE\"; "
      "if [ $RANK = 0 ]; then touch " +
      dir.path() +
      "/echoed; fi; "
      "if [ $RANK = 1 ] && [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then "
      "while [ ! -e " +
      dir.path() + "/echoed ]; do sleep 0.05; done; exit 5; fi";
  auto r = test::run_embedded(
      {"-n", "2", "--role", "trainer", "--max-restarts", "1", "/bin/sh", "-c", script});
  CHECK(r.code == 0);
  INFO(r.text);
  for (int attempt = 0; attempt < 2; ++attempt)
    for (int rank = 0; rank < 2; ++rank) {
      std::regex line("\\[rank" + std::to_string(rank) + "\\]: " + std::to_string(rank) +
                      " /\\S+_\\w+/attempt_" + std::to_string(attempt) + "/" +
                      std::to_string(rank) + "/error.json trainer 1 1 False");
      CHECK(std::regex_search(r.text, line));
    }
  // A user's own setting stays.
  auto own =
      test::run_embedded({"-n", "1", "/bin/sh", "-c", "echo nccl=$NCCL_ASYNC_ERROR_HANDLING"},
                         {{"NCCL_ASYNC_ERROR_HANDLING", "0"}});
  CHECK_THAT(own.text, Catch::Contains("nccl=0"));
}

TEST_CASE("a failed rank's recorded error is the root cause, first, even when stderr is silent") {
  long ts = 1764624000;
  std::string script = "if [ $RANK = 1 ]; then printf '%s' '" +
                       torch_error_json("ValueError: boom", ts) +
                       "' > $TORCHELASTIC_ERROR_FILE; exit 3; fi; exec sleep 30";
  auto r = test::run_embedded({"-n", "2", "--grace-period", "1", "/bin/sh", "-c", script});
  CHECK(r.code == 3);
  auto at = r.text.find("Root cause (first observed failure):");
  REQUIRE(at != std::string::npos);
  auto summary = r.text.substr(at);
  std::time_t t = ts;
  std::tm tm{};
  localtime_r(&t, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
  CHECK_THAT(summary, Catch::StartsWith("Root cause (first observed failure):\n"
                                        "  rank      : 1 (local rank 1), attempt 0\n"
                                        "  exit      : exited with code 3\n"
                                        "  time      : " +
                                        std::string(when) +
                                        "\n"
                                        "  error     : ValueError: boom\n"
                                        "  raised at : File \"/x/train.py\", line 9, in main\n"));
  // The root cause comes before the attempts' list.
  CHECK(summary.find("Attempts:\n  attempt 0: rank 1 exited with code 3\n    (no stderr output)") !=
        std::string::npos);
}

TEST_CASE("a rank without an error file is said to have none") {
  auto r = test::run_embedded({"-n", "1", "/bin/sh", "-c", "echo oops >&2; exit 4"});
  CHECK(r.code == 4);
  CHECK_THAT(r.text, Catch::Contains("  error     : (no error file: the program did not record "
                                     "one; torch's @record writes it)\n"));
}

TEST_CASE("ModuleNotFoundError: the summary names the interpreter and MUSTER_PYTHON") {
  if (test::system_python().empty()) {
    WARN("no /usr/bin/python3: not checked");
    return;
  }
  test::TempDir dir;
  test::spit(dir.path() + "/needs.py", "import no_such_module_for_muster_tests\n");
  auto r = test::run_embedded({"-n", "1", dir.path() + "/needs.py"},
                              {{"MUSTER_PYTHON", "/usr/bin/python3"}});
  CHECK(r.code == 1);
  CHECK_THAT(r.text, Catch::Contains("hint      : the workers ran /usr/bin/python3; if the module "
                                     "is installed for another Python, set MUSTER_PYTHON"));
  // -m of a module Python cannot find says "No module named", no exception.
  auto m = test::run_embedded({"-n", "1", "-m", "no_such_module_for_muster_tests"},
                              {{"MUSTER_PYTHON", "/usr/bin/python3"}});
  CHECK(m.code == 1);
  CHECK_THAT(m.text, Catch::Contains("hint      : the workers ran /usr/bin/python3"));
}

TEST_CASE("a program that cannot run is named, with why") {
  auto r = test::run_embedded({"-n", "1", "/nonexistent/trainer"});
  CHECK(r.code == 127);
  CHECK_THAT(r.text, Catch::Contains("muster run: cannot execute /nonexistent/trainer: no such "
                                     "file"));
}

TEST_CASE("--log-dir with -r and -t: files laid out as torch 1.13 lays them out") {
  test::TempDir logs;
  auto r =
      test::run_embedded({"-n", "2", "--rdzv-id", "lj", "--log-dir", logs.path(), "-r", "0:1,1:2",
                          "-t", "1:1", "/bin/sh", "-c", "echo out$RANK; echo err$RANK >&2"});
  CHECK(r.code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(r.text, m, std::regex("log directory (" + logs.path() + "/lj_\\w+)")));
  std::string base = m[1];
  CHECK(test::slurp(base + "/attempt_0/0/stdout.log") == "out0\n");
  CHECK(access((base + "/attempt_0/0/stderr.log").c_str(), F_OK) != 0);
  CHECK(test::slurp(base + "/attempt_0/1/stdout.log") == "out1\n");  // teed
  CHECK(test::slurp(base + "/attempt_0/1/stderr.log") == "err1\n");
  // Redirected streams leave the console; teed and untouched ones reach it.
  CHECK_THAT(r.text, !Catch::Contains("[rank0]: out0") && !Catch::Contains("[rank1]: err1"));
  CHECK_THAT(r.text, Catch::Contains("[rank0]: err0") && Catch::Contains("[rank1]: out1"));
}

TEST_CASE(
    "with --log-dir each attempt has its own directory and the summary names the error file") {
  test::TempDir logs;
  std::string script = "if [ $RANK = 1 ]; then printf '%s' '" +
                       torch_error_json("KeyError: 'lr'", 1764624000) +
                       "' > $TORCHELASTIC_ERROR_FILE; echo gone >&2; exit 2; fi";
  auto r = test::run_embedded({"-n", "2", "--rdzv_id", "lf", "--log_dir", logs.path(),
                               "--redirects", "3", "--max_restarts", "1", "/bin/sh", "-c", script});
  CHECK(r.code == 2);
  std::smatch m;
  REQUIRE(std::regex_search(
      r.text, m, std::regex("error file: (" + logs.path() + "/lf_\\w+)/attempt_1/1/error.json\n")));
  std::string base = m[1];
  for (const char* attempt : {"/attempt_0", "/attempt_1"}) {
    CHECK_THAT(test::slurp(base + attempt + "/1/error.json"), Catch::Contains("KeyError"));
    CHECK(test::slurp(base + attempt + "/1/stderr.log") == "gone\n");
  }
  // Redirected stderr still feeds the summary's last lines.
  CHECK_THAT(r.text, Catch::Contains("    [rank1]: gone\n"));
}

// Rank 0 listens on its MASTER_PORT only after a delay (as it would after
// `import torch`); rank 1 connects to its own at once, with no retry. The
// relay (cli/store_relay) makes that connect succeed and joins it to rank
// 0's listener; without it (--no-store-relay) rank 1 is refused.
TEST_CASE("rank 0's store: the others' MASTER_PORT answers before rank 0 listens") {
  test::TempDir dir;
  std::string prog = dir.path() + "/store.py";
  test::spit(prog,
             "import os, socket, time\n"
             "rank, port = int(os.environ['RANK']), int(os.environ['MASTER_PORT'])\n"
             "if rank == 0:\n"
             "    time.sleep(0.5)\n"
             "    s = socket.create_server(('', port), family=socket.AF_INET6, "
             "dualstack_ipv6=True)\n"
             "    c, _ = s.accept()\n"
             "    c.sendall(c.recv(4).upper())\n"
             "    print('listened on', port, flush=True)\n"
             "else:\n"
             "    c = socket.create_connection(('127.0.0.1', port))\n"
             "    c.sendall(b'ping')\n"
             "    print('got', c.recv(4).decode(), 'via', port, flush=True)\n");
  auto relayed = test::run_embedded({"-n", "2", "--cpu", prog});
  CAPTURE(relayed.text);
  CHECK(relayed.code == 0);
  CHECK_THAT(relayed.text, Catch::Contains("[rank1]: got PING via "));
  std::smatch m0, m1;
  REQUIRE(std::regex_search(relayed.text, m0, std::regex("listened on (\\d+)")));
  REQUIRE(std::regex_search(relayed.text, m1, std::regex("via (\\d+)")));
  CHECK(m0[1] != m1[1]);  // rank 1 has the relay's port

  auto direct = test::run_embedded({"--no-store-relay", "-n", "2", "--cpu", prog});
  CAPTURE(direct.text);
  CHECK(direct.code != 0);
  CHECK_THAT(direct.text, Catch::Contains("ConnectionRefusedError"));
}

TEST_CASE("--no-store-relay, or rank 0 on another node: every worker has MASTER_PORT itself") {
  auto r = test::run_embedded({"--no-store-relay", "-n", "3", "--master-port", "29561", "--use-env",
                               "/bin/sh", "-c", "echo port=$MASTER_PORT"});
  CHECK(r.code == 0);
  CHECK(std::regex_search(r.text, std::regex("\\[rank0\\]: port=29561")));
  CHECK(std::regex_search(r.text, std::regex("\\[rank2\\]: port=29561")));
  auto relayed = test::run_embedded({"-n", "2", "--master-port", "29561", "--use-env", "/bin/sh",
                                     "-c", "echo port=$MASTER_PORT"});
  CHECK(relayed.code == 0);
  // Rank 0 binds the port it was given (a program's tcp://HOST:29561 too);
  // the other ranks have the relay's.
  CHECK(std::regex_search(relayed.text, std::regex("\\[rank0\\]: port=29561")));
  CHECK_FALSE(std::regex_search(relayed.text, std::regex("\\[rank1\\]: port=29561")));
}
