// `muster run` end to end: real worker processes, an embedded or a private
// daemon, signals and failures.
#include <catch2/catch.hpp>

#include <signal.h>

#include <unistd.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "muster/client.hpp"
#include "support/muster_cli.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::Process;
using test::read_pids;
using test::unprefixed;

namespace {

std::map<std::string, std::string> env_for(const std::string& runtime_dir) {
  return test::embedded_env(runtime_dir);
}

std::vector<std::string> muster_run(std::vector<std::string> args) {
  return test::muster_cmd("run", std::move(args));
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("muster run -n 4 of the C++ example: ranks cooperate, one master writes its file") {
  test::TempDir dir;
  std::string out = dir.path() + "/result.txt";
  Process p(muster_run({"-n", "4", test::program("MUSTER_TEST_HELLO"), "--out", out}),
            env_for(dir.path()));
  auto text = p.read_all(30s);
  REQUIRE(p.wait(10s) == 0);
  for (int r = 0; r < 4; ++r) CHECK(count(text, "rank " + std::to_string(r) + "/4 ") == 1);
  CHECK(count(text, ": master=yes") == 1);
  CHECK(count(text, "local master: 4 ranks agreed on the total 18") == 1);
  CHECK(count(text, "master: wrote") == 1);
  std::ifstream f(out);
  std::string content((std::istreambuf_iterator<char>(f)), {});
  CHECK_THAT(content, Catch::Contains("world_size 4 total 18"));
}

TEST_CASE("workers are registered with pid and GPU before they start, and leases end with them") {
  test::TempDir dir;
  test::TestDaemon d({"--simulate-gpus", "2"});
  std::string script = "echo $$; " + test::program("MUSTER_TEST_MUSTER") + " status --json";
  Process p(muster_run({"-n", "2", "--use-env", "/bin/sh", "-c", script}),
            {{"MUSTER_ENDPOINT", d.endpoint()}});
  auto text = p.read_all(30s);
  REQUIRE(p.wait(10s) == 0);
  // Each worker sees itself in the daemon's status, with its own GPU.
  std::regex pid_line("^(\\d+)$");
  std::smatch m;
  std::istringstream lines(text);
  std::string line;
  int seen = 0;
  while (std::getline(lines, line)) {
    line = unprefixed(line);
    if (!std::regex_match(line, m, pid_line)) continue;
    std::string pid = m[1];
    std::regex me("\\{\"rank\":(\\d),\"local_rank\":\\d,\"pid\":" + pid +
                  ",\"device\":(\\d),\"state\":\"running\",\"cpus\":\"[0-9,-]+\"\\}");
    CHECK(std::regex_search(text, me));
    ++seen;
  }
  CHECK(seen == 2);
  // Both workers are gone: so are their leases.
  auto s = Client({d.endpoint()}).status();
  CHECK(s.jobs.empty());
  for (const auto& dev : s.devices) CHECK(dev.job.empty());
}

TEST_CASE("too few free GPUs: muster run says so and starts nothing") {
  test::TempDir dir;
  Process p(muster_run({"-n", "3", "--simulate-gpus", "2", "/bin/echo", "started"}),
            env_for(dir.path()), true);
  auto text = p.read_all(20s);
  CHECK(p.wait(10s) == 1);
  CHECK_THAT(text, Catch::Contains("needs 3 GPU(s) but only 2"));
  CHECK(count(text, "started") == 0);
}

TEST_CASE("a failing worker stops the others and muster run exits with its code") {
  test::TempDir dir;
  auto t0 = std::chrono::steady_clock::now();
  Process p(muster_run({"-n", "3", "--use-env", "--grace-period", "1", "/bin/sh", "-c",
                        "echo $$; if [ \"$RANK\" = 1 ]; then sleep 1; exit 3; fi; exec sleep 30"}),
            env_for(dir.path()));
  auto pids = read_pids(p, 3);
  REQUIRE(pids.size() == 3);
  CHECK(p.wait(15s) == 3);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  for (auto pid : pids) CHECK_FALSE(test::process_exists(pid));
}

TEST_CASE("a worker that ignores SIGTERM is killed after the grace period") {
  test::TempDir dir;
  Process p(muster_run({"-n", "2", "--use-env", "--grace-period", "0.5", "/bin/sh", "-c",
                        "trap '' TERM; echo $$; if [ \"$RANK\" = 0 ]; then sleep 1; exit 5; fi; "
                        "while :; do sleep 0.1; done"}),
            env_for(dir.path()));
  auto pids = read_pids(p, 2);
  REQUIRE(pids.size() == 2);
  CHECK(p.wait(10s) == 5);
  for (auto pid : pids) CHECK_FALSE(test::process_exists(pid));
}

// torchrun logs a worker it had to SIGKILL; a program that saves a
// checkpoint on SIGTERM and was cut short must not vanish without a word.
TEST_CASE("a worker killed after its grace period is named in one line") {
  test::TempDir dir;
  Process p(muster_run({"-n", "2", "--use-env", "--grace-period", "0.5", "/bin/sh", "-c",
                        "trap '' TERM; if [ \"$RANK\" = 0 ]; then sleep 1; exit 5; fi; "
                        "echo ignoring; while :; do sleep 0.1; done"}),
            env_for(dir.path()), true);
  auto text = p.read_all(20s);
  CHECK(p.wait(10s) == 5);
  CAPTURE(text);
  CHECK(count(text,
              "still running 0.5 s after SIGTERM: killing them with SIGKILL "
              "(--grace-period)") == 1);
  CHECK_THAT(text, Catch::Contains("rank(s) 1 (pid "));
}

// A worker that ends within its grace is not said to be killed.
TEST_CASE("workers that end within the grace period are not said to be killed") {
  test::TempDir dir;
  Process p(muster_run({"-n", "2", "--use-env", "--grace-period", "5", "/bin/sh", "-c",
                        "if [ \"$RANK\" = 0 ]; then sleep 0.5; exit 5; fi; exec sleep 30"}),
            env_for(dir.path()), true);
  auto text = p.read_all(20s);
  CHECK(p.wait(10s) == 5);
  CAPTURE(text);
  CHECK(count(text, "SIGKILL") == 0);
}

TEST_CASE("Ctrl-C reaches every worker and nothing outlives muster run") {
  test::TempDir dir;
  Process p(
      muster_run({"-n", "2", "--use-env", "/bin/sh", "-c", "echo $$; sleep 30 & echo $!; wait"}),
      env_for(dir.path()));
  auto pids = read_pids(p, 4);  // two workers and a grandchild each
  REQUIRE(pids.size() == 4);
  p.signal(SIGINT);
  CHECK(p.wait(10s) == 130);
  for (auto pid : pids) CHECK(test::eventually([&] { return !test::process_exists(pid); }, 2s));
}

TEST_CASE("workers die with muster run even when it is SIGKILLed") {
  test::TempDir dir;
  Process p(muster_run({"-n", "2", "--use-env", "/bin/sh", "-c", "echo $$; exec sleep 30"}),
            env_for(dir.path()));
  auto pids = read_pids(p, 2);
  REQUIRE(pids.size() == 2);
  p.signal(SIGKILL);
  CHECK(p.wait(5s) == 128 + SIGKILL);
  for (auto pid : pids) CHECK(test::eventually([&] { return !test::process_exists(pid); }, 2s));
}

TEST_CASE("workers get torchrun's environment") {
  test::TempDir dir;
  Process p(
      muster_run({"-n", "2", "--job-id", "envjob", "--use-env", "/bin/sh", "-c",
                  "echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK "
                  "$MASTER_ADDR $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_MAX_RESTARTS "
                  "$TORCHELASTIC_RUN_ID $MUSTER_JOB_ID port=$MASTER_PORT ep=$MUSTER_ENDPOINT"}),
      env_for(dir.path()));
  auto text = p.read_all(20s);
  REQUIRE(p.wait(5s) == 0);
  CHECK_THAT(text, Catch::Contains("0 0 2 2 0 127.0.0.1 0 0 envjob envjob port="));
  CHECK_THAT(text, Catch::Contains("1 1 2 2 0 127.0.0.1 0 0 envjob envjob port="));
  CHECK_THAT(text, Catch::Contains("ep=ipc://" + dir.path() + "/musterd.sock"));
  std::regex port("port=(\\d+)");
  std::smatch m;
  REQUIRE(std::regex_search(text, m, port));
  CHECK(std::stoi(m[1]) > 0);
}

TEST_CASE("muster run refuses bad arguments with exit code 2") {
  test::TempDir dir;
  for (std::vector<std::string> args : {std::vector<std::string>{"-n", "0", "/bin/true"},
                                        {"--bogus", "/bin/true"},
                                        {"-n", "2"},
                                        {"--devices", "0,a", "/bin/true"}}) {
    Process p(muster_run(args), env_for(dir.path()), true);
    auto text = p.read_all(10s);
    CHECK(p.wait(5s) == 2);
    CHECK_THAT(text, Catch::Contains("muster run:"));
  }
}

TEST_CASE("muster status reports a missing daemon clearly") {
  test::TempDir dir;
  auto t0 = std::chrono::steady_clock::now();
  Process p({test::program("MUSTER_TEST_MUSTER"), "status"},
            {{"MUSTER_ENDPOINT", "ipc://" + dir.path() + "/musterd.sock"}}, true);
  auto text = p.read_all(30s);
  CHECK(p.wait(30s) == 1);
  CHECK_THAT(text, Catch::Contains("no musterd runs at " + dir.path() + "/musterd.sock"));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}

// --wait-for-gpus: a job whose GPUs another job holds waits (saying who
// holds them) and starts when they come free; past its time, or on Ctrl-C,
// it ends without starting a worker.
TEST_CASE("muster run --wait-for-gpus waits for a leased GPU, gives up after its time") {
  test::TestDaemon d({"--simulate-gpus", "1"});
  std::map<std::string, std::string> env{{"MUSTER_ENDPOINT", d.endpoint()}};
  Process a(muster_run({"-n", "1", "--use-env", "/bin/sh", "-c", "echo up; sleep 4"}), env);
  REQUIRE(a.read_line(10s).value_or("") == "[rank0]: up");
  // Without the flag: at once, as before.
  Process now(muster_run({"-n", "1", "/bin/true"}), env, true);
  auto now_text = now.read_all(10s);
  CHECK(now.wait(5s) == 1);
  CHECK_THAT(now_text, Catch::Contains("is leased to job"));
  // Too short a wait: the sentence, exit 1, no worker.
  Process brief(muster_run({"-n", "1", "--wait-for-gpus", "1", "/bin/echo", "ran"}), env, true);
  auto brief_text = brief.read_all(10s);
  CHECK(brief.wait(5s) == 1);
  CHECK_THAT(brief_text, Catch::Contains("waiting for GPUs (0 s of 1 s, --wait-for-gpus)"));
  CHECK_THAT(brief_text, Catch::Contains("no GPUs came free in 1 s"));
  CHECK_THAT(brief_text, !Catch::Contains("[rank0]: ran"));
  // Ctrl-C while waiting: 130, saying no worker started.
  Process stopped(muster_run({"-n", "1", "--wait-for-gpus", "60", "/bin/echo", "ran"}), env, true);
  CHECK_THAT(stopped.read_line(10s).value_or(""), Catch::Contains("waiting for GPUs"));
  stopped.signal(SIGINT);
  auto stopped_text = stopped.read_all(10s);
  CHECK(stopped.wait(5s) == 130);
  CHECK_THAT(stopped_text, Catch::Contains("stopped waiting for GPUs; no worker was started"));
  // Long enough: starts once A's GPU is free.
  Process b(
      muster_run({"-n", "1", "--wait-for-gpus", "60", "/bin/sh", "-c", "echo got $MUSTER_DEVICE"}),
      env, true);
  auto b_text = b.read_all(30s);
  CHECK(b.wait(5s) == 0);
  CHECK_THAT(b_text, Catch::Contains("waiting for GPUs"));
  CHECK_THAT(b_text, Catch::Contains("[rank0]: got 0"));
  CHECK(a.wait(10s) == 0);
}

TEST_CASE("muster status shows a running job's ranks and leases") {
  test::TestDaemon d({"--simulate-gpus", "2"});
  Process p(muster_run({"-n", "2", "--use-env", "/bin/sh", "-c", "echo $$; exec sleep 30"}),
            {{"MUSTER_ENDPOINT", d.endpoint()}});
  auto pids = read_pids(p, 2);
  REQUIRE(pids.size() == 2);
  Process st({test::program("MUSTER_TEST_MUSTER"), "status"}, {{"MUSTER_ENDPOINT", d.endpoint()}});
  auto table = st.read_all(10s);
  CHECK(st.wait(5s) == 0);
  CHECK_THAT(table, Catch::Contains("simulated GPU 0"));
  CHECK_THAT(table, Catch::Contains("world size 2"));
  for (auto pid : pids) CHECK_THAT(table, Catch::Contains(std::to_string(pid)));
  CHECK_THAT(table, Catch::Contains("running"));
  p.signal(SIGTERM);
  CHECK(p.wait(10s) == 128 + SIGTERM);
}

TEST_CASE("the embedded daemon outlives a SIGKILLed launcher while another job still uses it") {
  test::TempDir dir;
  auto env = env_for(dir.path());
  Process a(muster_run({"-n", "1", "--simulate-gpus", "2", "--use-env", "/bin/sh", "-c",
                        "echo $$; exec sleep 30"}),
            env);
  auto a_pids = read_pids(a, 1);
  REQUIRE(a_pids.size() == 1);
  Process b(muster_run(
                {"-n", "1", "--use-env", "/bin/sh", "-c", "echo $$ $MUSTER_DEVICE; exec sleep 30"}),
            env);
  auto b_line = unprefixed(b.read_line(10s).value_or(""));
  REQUIRE(b_line.find(' ') != std::string::npos);
  pid_t b_pid = std::stoi(b_line);
  CHECK(b_line.substr(b_line.find(' ') + 1) == "1");
  a.signal(SIGKILL);
  CHECK(a.wait(5s) == 128 + SIGKILL);
  CHECK(test::eventually([&] { return !test::process_exists(a_pids[0]); }, 2s));
  CHECK(test::process_exists(b_pid));
  // B's GPU is still leased: a job of two cannot start, a job of one can.
  Process c(muster_run({"-n", "2", "/bin/true"}), env, true);
  auto c_text = c.read_all(20s);
  CHECK(c.wait(10s) == 1);
  CHECK_THAT(c_text, Catch::Contains("needs 2 GPU(s) but only 1"));
  b.signal(SIGTERM);
  CHECK(b.wait(10s) == 128 + SIGTERM);
  // With no job left the embedded daemon goes too.
  CHECK(test::eventually([&] { return access((dir.path() + "/musterd.sock").c_str(), F_OK) != 0; },
                         5s));
}

TEST_CASE("a worker started through a wrapper script still joins its registered rank") {
  test::TestDaemon d({"--simulate-gpus", "2"});
  // The shell does not exec: the joining process is the wrapper's child.
  Process p(muster_run({"-n", "2", "--use-env", "/bin/sh", "-c",
                        test::program("MUSTER_TEST_HELLO") + " --out /dev/null; true"}),
            {{"MUSTER_ENDPOINT", d.endpoint()}});
  auto text = p.read_all(30s);
  CHECK(p.wait(10s) == 0);
  CHECK(count(text, "gpu 0:") + count(text, "gpu 1:") == 2);
  CHECK_THAT(text, Catch::Contains("agreed on the total 3"));
}

TEST_CASE("--cpu leases no GPU even when the daemon has some") {
  test::TempDir dir;
  Process p(muster_run({"-n", "2", "--cpu", "--simulate-gpus", "2", "--use-env", "/bin/sh", "-c",
                        "echo device=$MUSTER_DEVICE"}),
            env_for(dir.path()));
  auto text = p.read_all(20s);
  REQUIRE(p.wait(10s) == 0);
  CHECK(count(text, "device=-1") == 2);
}

TEST_CASE("--max-restarts: a rank failing once is restarted with the next generation") {
  test::TempDir dir;
  // Rank 1 fails on the first attempt only.
  std::string script =
      "echo attempt=$TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS "
      "gen=$MUSTER_GENERATION; "
      "if [ \"$RANK\" = 1 ] && [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then exit 4; fi";
  Process p(muster_run({"-n", "2", "--max-restarts", "1", "--use-env", "--grace-period", "1",
                        "/bin/sh", "-c", script}),
            env_for(dir.path()), true);
  auto text = p.read_all(30s);
  CHECK(p.wait(10s) == 0);
  CHECK(count(text, "[rank0]: attempt=1/1 gen=1") == 1);
  CHECK(count(text, "[rank1]: attempt=1/1 gen=1") == 1);
  CHECK(count(text, "restarting the group (restart 1 of 1)") == 1);
  CHECK(count(text, "attempt=2") == 0);

  // torchrun's spelling; and no restart is allowed by default.
  Process once(muster_run({"-n", "1", "--use-env", "/bin/sh", "-c",
                           "echo try $TORCHELASTIC_RESTART_COUNT; exit 4"}),
               env_for(dir.path()), true);
  auto once_text = once.read_all(30s);
  CHECK(once.wait(10s) == 4);
  CHECK(count(once_text, "try ") == 1);
  Process twice(muster_run({"-n", "1", "--max_restarts", "1", "--use-env", "/bin/sh", "-c",
                            "echo try $TORCHELASTIC_RESTART_COUNT; exit 4"}),
                env_for(dir.path()), true);
  auto twice_text = twice.read_all(30s);
  CHECK(twice.wait(10s) == 4);
  CHECK(count(twice_text, "[rank0]: try 1") == 1);
}

TEST_CASE("exhausted restarts exit with the worker's code and sum up every attempt") {
  test::TestDaemon d;
  std::string script =
      "if [ \"$RANK\" = 1 ]; then echo \"noise $TORCHELASTIC_RESTART_COUNT\" >&2; "
      "echo \"last words $TORCHELASTIC_RESTART_COUNT\" >&2; exit 9; fi; exec sleep 30";
  auto t0 = std::chrono::steady_clock::now();
  Process p(muster_run({"-n", "2", "--max-restarts", "2", "--use-env", "--grace-period", "1",
                        "/bin/sh", "-c", script}),
            {{"MUSTER_ENDPOINT", d.endpoint()}}, true);
  auto text = p.read_all(40s);
  CHECK(p.wait(10s) == 9);
  CHECK(std::chrono::steady_clock::now() - t0 < 20s);
  auto summary_at = text.find("the job failed in all 3 attempt(s)");
  REQUIRE(summary_at != std::string::npos);
  auto summary = text.substr(summary_at);
  for (int a = 0; a < 3; ++a) {
    CHECK_THAT(summary, Catch::Contains("attempt " + std::to_string(a) +
                                        ": rank 1 exited with code 9\n    [rank1]: noise " +
                                        std::to_string(a) + "\n    [rank1]: last words " +
                                        std::to_string(a) + "\n"));
  }
  // The job is gone from the daemon.
  CHECK(test::eventually([&] { return Client({d.endpoint()}).status().jobs.empty(); }, 3s));

  // A signal is named.
  Process k(muster_run({"-n", "1", "--use-env", "/bin/sh", "-c", "kill -SEGV $$"}),
            {{"MUSTER_ENDPOINT", d.endpoint()}}, true);
  auto k_text = k.read_all(20s);
  CHECK(k.wait(10s) == 128 + SIGSEGV);
  CHECK_THAT(k_text, Catch::Contains("rank 0 was killed by signal 11 (SIGSEGV)"));
}

TEST_CASE("workers' stdout and stderr lines carry their rank, unless --no-prefix-output") {
  test::TempDir dir;
  // A line written in two pieces stays whole; a last line without newline is kept.
  std::string script =
      "printf 'out-a '; sleep 0.2; echo \"$RANK\"; echo \"err $RANK\" >&2; printf tail";
  Process out_only(muster_run({"-n", "2", "--use-env", "/bin/sh", "-c", script}),
                   env_for(dir.path()));
  auto out = out_only.read_all(20s);
  CHECK(out_only.wait(10s) == 0);
  CHECK(count(out, "[rank0]: out-a 0\n") == 1);
  CHECK(count(out, "[rank1]: out-a 1\n") == 1);
  CHECK(count(out, "[rank0]: tail\n") == 1);
  CHECK(count(out, "err ") == 0);  // stderr stays on stderr

  Process both(muster_run({"-n", "2", "--use-env", "/bin/sh", "-c", script}), env_for(dir.path()),
               true);
  auto all = both.read_all(20s);
  CHECK(both.wait(10s) == 0);
  CHECK(count(all, "[rank0]: err 0\n") == 1);
  CHECK(count(all, "[rank1]: err 1\n") == 1);

  Process plain(muster_run({"-n", "1", "--no-prefix-output", "--use-env", "/bin/sh", "-c",
                            "echo hello; echo oops >&2"}),
                env_for(dir.path()), true);
  auto plain_text = plain.read_all(20s);
  CHECK(plain.wait(10s) == 0);
  CHECK_THAT(plain_text, Catch::Contains("hello\n"));
  CHECK_THAT(plain_text, Catch::Contains("oops\n"));
  CHECK(count(plain_text, "[rank") == 0);
}

TEST_CASE("Ctrl-C during a restartable job is not retried") {
  test::TempDir dir;
  Process p(muster_run({"-n", "2", "--max-restarts", "3", "--use-env", "/bin/sh", "-c",
                        "echo $$ try=$TORCHELASTIC_RESTART_COUNT; exec sleep 30"}),
            env_for(dir.path()), true);
  auto pids = read_pids(p, 2);
  REQUIRE(pids.size() == 2);
  p.signal(SIGINT);
  auto rest = p.read_all(15s);
  CHECK(p.wait(10s) == 130);
  CHECK(count(rest, "try=") == 0);
  CHECK(count(rest, "restarting") == 0);
  for (auto pid : pids) CHECK(test::eventually([&] { return !test::process_exists(pid); }, 2s));
}

namespace {

// The guardian's pid from MUSTER_RUN_GUARD=[OUTER,]PID-TOKEN (ours is last).
pid_t guardian_of(const std::string& guard) {
  auto last = guard.substr(guard.rfind(',') == std::string::npos ? 0 : guard.rfind(',') + 1);
  return static_cast<pid_t>(std::stoi(last.substr(0, last.find('-'))));
}

}  // namespace

TEST_CASE("a worker's children die with muster run when it is SIGKILLed, even outside its group") {
  test::TempDir dir;
  // The worker starts a grandchild in its group and one in a session of its
  // own (setsid), prints its pid, theirs and the guard, and waits.
  Process p(muster_run({"-n", "1", "--use-env", "/bin/sh", "-c",
                        "echo $$; sleep 1000 & echo $!; setsid sleep 1000 & echo $!; "
                        "echo \"guard=$MUSTER_RUN_GUARD\"; wait"}),
            env_for(dir.path()));
  auto pids = read_pids(p, 3);
  REQUIRE(pids.size() == 3);
  auto guard_line = unprefixed(p.read_line(10s).value_or(""));
  auto guard = guard_line.rfind("guard=", 0) == 0 ? guard_line.substr(6) : "";
  for (auto pid : pids) REQUIRE(test::process_exists(pid));
  p.signal(SIGKILL);
  CHECK(p.wait(5s) == 128 + SIGKILL);
  for (auto pid : pids) CHECK(test::eventually([&] { return !test::process_exists(pid); }, 3s));
  // The guardian that killed them goes with its job.
  REQUIRE_FALSE(guard.empty());
  pid_t guardian = guardian_of(guard);
  CHECK(test::eventually([&] { return !test::process_exists(guardian); }, 3s));
}

TEST_CASE("muster run's guardian is gone when muster run exits normally") {
  test::TempDir dir;
  Process p(muster_run({"-n", "2", "--use-env", "/bin/sh", "-c", "echo $MUSTER_RUN_GUARD"}),
            env_for(dir.path()));
  auto text = p.read_all(20s);
  REQUIRE(p.wait(10s) == 0);
  std::istringstream lines(text);
  std::string line;
  std::set<pid_t> guardians;
  while (std::getline(lines, line)) guardians.insert(guardian_of(unprefixed(line)));
  REQUIRE(guardians.size() == 1);  // one guardian for all workers
  pid_t guardian = *guardians.begin();
  CHECK(test::eventually([&] { return !test::process_exists(guardian); }, 1s));
}
