// Which rank is stuck where (issue #23): a job of 4 ranks where 3 reach a
// barrier (or wait for a key) and one never does. `muster status` and
// `--json` name the missing rank and its pid; musterd --stuck-after 1 logs
// the stuck wait once; `--watch` redraws on a terminal and appends in a
// pipe; bad input is refused with exit code 2.
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <functional>
#include <thread>

#include "stuck_support.hpp"

using namespace muster::test;
using namespace std::chrono_literals;

namespace {

// Four ranks of `job` on the daemon: local ranks 0..2 do `op` on `name`,
// rank 3 idles. Returns them once each joined.
std::vector<std::unique_ptr<Process>> four_ranks(const LoggedDaemon& d, const std::string& job,
                                                 const std::string& op, const std::string& name) {
  std::vector<std::unique_ptr<Process>> ranks;
  for (int i = 0; i < 4; ++i)
    ranks.push_back(std::make_unique<Process>(
        std::vector<std::string>{stuck_rank_program(), job, "4", std::to_string(i),
                                 i == 3 ? "idle" : op, name},
        d.env()));
  for (auto& r : ranks) REQUIRE(joined(*r));
  return ranks;
}

}  // namespace

TEST_CASE("status names the rank that never reaches a barrier, and the daemon logs it once") {
  LoggedDaemon d({"--stuck-after", "1"});
  auto ranks = four_ranks(d, "stuckjob", "barrier", "epoch-3");
  const std::string pid = std::to_string(ranks[3]->pid());
  const std::string want =
      "barrier 'epoch-3': 3/4, waiting for rank 3 (node 0, pid " + pid + ") for ";
  Ran human;
  // The picture is there as soon as the three arrived; STUCK once a second passed.
  REQUIRE(eventually(
      [&] {
        human = muster_status(d.endpoint, {});
        return human.out.find("STUCK " + want) != std::string::npos;
      },
      30s));
  INFO(human.out);
  CHECK(human.rc == 0);

  auto json = muster_status(d.endpoint, {"--json"});
  REQUIRE(json.rc == 0);
  auto job = job_of(json.out, "stuckjob");
  REQUIRE(job["waits"].size() == 1);
  auto w = job["waits"][0];
  CHECK(w["kind"] == "barrier");
  CHECK(w["name"] == "epoch-3");
  CHECK(w["arrived"] == 3);
  CHECK(w["expected"] == 4);
  CHECK(w["stuck"] == true);
  CHECK(w["age_s"].get<double>() >= 1.0);
  REQUIRE(w["missing"].size() == 1);
  CHECK(w["missing"][0]["rank"] == 3);
  CHECK(w["missing"][0]["node"] == 0);
  CHECK(w["missing"][0]["pid"] == ranks[3]->pid());

  // One stuck line, and still one after several more stuck-after periods.
  const std::string line = "job=stuckjob stuck: " + want;
  CHECK(d.count(line, 3500ms) == 1);

  // The missing rank dies: the barrier cannot complete, its arrivals are
  // failed, and status shows no wait any more.
  ranks[3]->signal(SIGKILL);
  for (int i = 0; i < 3; ++i) {
    auto end = ranks[i]->read_line(30s);
    REQUIRE(end);
    CHECK(end->find("error=peer_exited") != std::string::npos);
  }
  auto after = job_of(muster_status(d.endpoint, {"--json"}).out, "stuckjob");
  CHECK(after["waits"].empty());
}

TEST_CASE("status names the ranks that wait for a key nobody sets, and the daemon logs it once") {
  LoggedDaemon d({"--stuck-after", "1"});
  auto ranks = four_ranks(d, "keyjob", "get", "ready");
  Ran human;
  REQUIRE(eventually(
      [&] {
        human = muster_status(d.endpoint, {});
        return human.out.find("STUCK rank 0 (node 0, pid " + std::to_string(ranks[0]->pid()) +
                              "), rank 1 (node 0, pid " + std::to_string(ranks[1]->pid()) +
                              "), rank 2 (node 0, pid " + std::to_string(ranks[2]->pid()) +
                              ") wait for key 'ready' for ") != std::string::npos;
      },
      30s));
  auto job = job_of(muster_status(d.endpoint, {"--json"}).out, "keyjob");
  REQUIRE(job["waits"].size() == 1);
  auto w = job["waits"][0];
  CHECK(w["kind"] == "key");
  CHECK(w["name"] == "ready");
  CHECK(w["arrived"] == 3);
  CHECK(w["expected"].is_null());
  REQUIRE(w["waiting"].size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(w["waiting"][i]["rank"] == i);
    CHECK(w["waiting"][i]["pid"] == ranks[i]->pid());
  }
  // One line names all three waiting ranks, once.
  const std::string line = "job=keyjob stuck: rank 0 (node 0, pid ";
  CHECK(d.count(line, 3500ms) == 1);
  CHECK(d.count("wait for key 'ready'", 0ms) == 1);
}

namespace {

// Counts the occurrences of what in s.
size_t occurrences(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

// `muster status ARGS...` on a pseudo-terminal: its output until `until`
// says enough or the timeout, then SIGINT; the exit code and the output.
Ran on_terminal(const std::string& endpoint, std::vector<std::string> args,
                const std::function<bool(const std::string&)>& until) {
  auto argv = muster_cmd("status", std::move(args));
  int master = -1;
  pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setenv("MUSTER_ENDPOINT", endpoint.c_str(), 1);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  Ran r;
  auto read_some = [&](std::chrono::milliseconds for_) {
    auto end = std::chrono::steady_clock::now() + for_;
    while (std::chrono::steady_clock::now() < end) {
      pollfd p{master, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(master, buf, sizeof buf);
      if (n <= 0) return;  // EIO: the child closed the terminal
      r.out.append(buf, static_cast<size_t>(n));
      if (until(r.out)) return;
    }
  };
  read_some(30s);
  ::kill(pid, SIGINT);
  read_some(2s);
  int st = 0;
  for (int i = 0; i < 1000 && ::waitpid(pid, &st, WNOHANG) == 0; ++i) ::usleep(10000);
  if (::waitpid(pid, &st, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &st, 0);
  }
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  ::close(master);
  return r;
}

}  // namespace

TEST_CASE("status --watch redraws in place on a terminal and ends cleanly on SIGINT") {
  LoggedDaemon d({"--stuck-after", "1", "--simulate-gpus", "2"});
  auto ranks = four_ranks(d, "watchjob", "barrier", "epoch-3");
  const std::string redraw = "\x1b[H\x1b[2J";
  auto r = on_terminal(d.endpoint, {"--watch", "--interval", "0.2"}, [&](const std::string& s) {
    return occurrences(s, redraw) >= 3 &&
           s.find("\x1b[1;31mSTUCK barrier 'epoch-3'") != std::string::npos;
  });
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(occurrences(r.out, redraw) >= 2);
  // GPUs, the job, its waits; the stuck one in bold red; the terminal put
  // back (colors off, cursor shown) at the end.
  CHECK(r.out.find("Job watchjob") != std::string::npos);
  CHECK(r.out.find("GPU") != std::string::npos);
  CHECK(r.out.find("\x1b[1;31mSTUCK barrier 'epoch-3': 3/4, waiting for rank 3") !=
        std::string::npos);
  CHECK(r.out.rfind("\x1b[0m\x1b[?25h") != std::string::npos);
  CHECK(r.out.rfind("\x1b[0m\x1b[?25h") > r.out.rfind(redraw));
}

TEST_CASE("status --watch in a pipe appends snapshots, plain, until SIGTERM") {
  LoggedDaemon d({"--stuck-after", "1"});
  auto ranks = four_ranks(d, "pipejob", "barrier", "epoch-3");
  Process p(muster_cmd("status", {"--watch", "--interval", "0.2"}), d.env(), true);
  std::string out;
  REQUIRE(eventually(
      [&] {
        if (auto l = p.read_line(100ms)) out += *l + "\n";
        return occurrences(out, "--- muster status at ") >= 3 &&
               out.find("STUCK barrier 'epoch-3'") != std::string::npos;
      },
      30s));
  p.signal(SIGTERM);
  out += p.read_all(10s);
  INFO(out);
  CHECK(p.wait(10s) == 0);
  CHECK(occurrences(out, "Job pipejob") >= 3);
  CHECK(out.find('\x1b') == std::string::npos);  // no escapes in a pipe
}

TEST_CASE("status refuses bad --interval and --job input with exit code 2") {
  LoggedDaemon d;
  auto zero = muster_status(d.endpoint, {"--watch", "--interval", "0"});
  CHECK(zero.rc == 2);
  CHECK(zero.out.find("--interval takes seconds from 0.1 to 86400, not '0'") != std::string::npos);
  auto word = muster_status(d.endpoint, {"--watch", "--interval", "abc"});
  CHECK(word.rc == 2);
  CHECK(word.out.find("not 'abc'") != std::string::npos);
  auto lone = muster_status(d.endpoint, {"--interval", "1"});
  CHECK(lone.rc == 2);
  CHECK(lone.out.find("--interval goes with --watch") != std::string::npos);
  auto nojob = muster_status(d.endpoint, {"--job", "nope"});
  CHECK(nojob.rc == 2);
  CHECK(nojob.out.find("no job 'nope' on this daemon") != std::string::npos);
  // --watch of an unknown job stops at the first snapshot, the same way.
  auto watched = muster_status(d.endpoint, {"--watch", "--job", "nope"});
  CHECK(watched.rc == 2);
  CHECK(watched.out.find("no job 'nope'") != std::string::npos);
  // The daemon is none the worse: status still answers.
  CHECK(muster_status(d.endpoint, {}).rc == 0);
}
