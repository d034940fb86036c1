// Resumable samplers' progress in the daemon (sampler_commit/sampler_resume,
// issue #24): kept per job for as long as the run's launcher lives, across
// the jobs of its generations and a daemon restart, and dropped with it.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

#include "muster/client.hpp"
#include "muster/launcher.hpp"
#include "muster/muster.h"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::Process;
using test::TestDaemon;
using Opts = Client::ShardOptions;

namespace {

// Runs f in a forked child and returns what it returns ("" when it threw or
// died): a worker of a launched job lives in the job's cgroup and is ended
// with it, which must not be this test process.
std::string in_child(const std::function<std::string()>& f) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string r;
    try {
      r = f();
    } catch (const std::exception& e) {
      r = std::string("error: ") + e.what();
    }
    (void)!::write(fds[1], r.data(), r.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return out;
}

// One generation of a launched job in a child, its only worker: reserved
// for `launcher`, attached, joined; then f(worker).
std::string generation(const TestDaemon& d, int64_t launcher, uint64_t gen,
                       const std::function<std::string(Client&)>& f) {
  return in_child([&] {
    Client booker(ClientOptions{d.endpoint()});
    muster::reserve(booker, "train", 1, false, {}, launcher, gen);
    muster::attach(booker, "train", {static_cast<int64_t>(::getpid())});
    Client w(ClientOptions{d.endpoint()});
    w.join({"train", 1, false, 0});
    return f(w);
  });
}

std::string place(Client& w) {
  auto p = w.sampler_resume(1000, 7, true);
  if (!p) return "none";
  return std::to_string(p->epoch) + "/" + std::to_string(p->consumed) + "/" +
         std::to_string(w.sampler_shard(*p).size());
}

// The job is gone once its worker's exit is seen.
void wait_job_gone(const TestDaemon& d) {
  CHECK(test::eventually([&] { return Client(ClientOptions{d.endpoint()}).status().jobs.empty(); },
                         10s));
}

}  // namespace

TEST_CASE("a commit outlives the run's generations and a daemon restart, and ends with the run",
          "[sampler][resume]") {
  TestDaemon d;
  Process launcher({"sleep", "300"});
  CHECK(generation(d, launcher.pid(), 0, [](Client& w) {
          std::string before = place(w);
          w.sampler_commit({1000, 2, 7, true, false, 120});
          w.sampler_commit({1000, 2, 7, true, false, 300});  // the last commit wins
          w.sampler_commit({50, 0, 1, false, true, 10});     // another sampler of the run
          return before;
        }) == "none");
  wait_job_gone(d);
  // The next generation: epoch 2 from 300, the rest of it (700) to shard.
  CHECK(generation(d, launcher.pid(), 1, place) == "2/300/700");
  wait_job_gone(d);

  d.kill9();
  d.start();
  CHECK(generation(d, launcher.pid(), 2, [](Client& w) {
          auto other = w.sampler_resume(50, 1, false);
          return place(w) + (other && other->consumed == 10 && other->drop_last ? " +" : " -");
        }) == "2/300/700 +");
  wait_job_gone(d);

  // The run ends (its launcher does): a new run under the same id starts fresh.
  launcher.signal(SIGKILL);
  REQUIRE(launcher.wait(10s).has_value());
  Process next({"sleep", "300"});
  CHECK(generation(d, next.pid(), 0, place) == "none");
  next.signal(SIGKILL);
}

TEST_CASE("without a launcher a commit lives as long as its job", "[sampler][resume]") {
  TestDaemon d;
  {
    Client w(ClientOptions{d.endpoint()});
    w.join({"joined", 1, false, 0});
    w.sampler_commit({100, 1, 0, true, false, 40});
    CHECK(w.sampler_resume(100, 0, true)->consumed == 40);
    w.leave();
  }
  Client w(ClientOptions{d.endpoint()});
  w.join({"joined", 1, false, 0});
  CHECK_FALSE(w.sampler_resume(100, 0, true).has_value());
}

TEST_CASE("bad commits are refused and change nothing", "[sampler][resume]") {
  TestDaemon d;
  Client w(ClientOptions{d.endpoint()});
  w.join({"j", 1, false, 0});
  CHECK_THROWS_AS(w.sampler_commit({100, 0, 0, true, false, 101}), Error);
  CHECK_FALSE(w.sampler_resume(100, 0, true).has_value());
  Client unjoined(ClientOptions{d.endpoint()});
  CHECK_THROWS_AS(unjoined.sampler_commit({100, 0, 0, true, false, 1}), Error);

  // The C ABI.
  muster_client* c = muster_client_new(d.endpoint().c_str());
  REQUIRE(c);
  muster_rank_info info;
  REQUIRE(muster_join(c, "capi", 1, 0, 0, &info) == 0);
  int found = -1;
  uint64_t epoch = 9, consumed = 9;
  REQUIRE(muster_sampler_resume(c, 64, 3, 1, &found, &epoch, &consumed) == 0);
  CHECK((found == 0 && epoch == 0 && consumed == 0));
  REQUIRE(muster_sampler_commit(c, 64, 5, 3, 1, 0, 20) == 0);
  REQUIRE(muster_sampler_resume(c, 64, 3, 1, &found, &epoch, &consumed) == 0);
  CHECK((found == 1 && epoch == 5 && consumed == 20));
  CHECK(muster_sampler_commit(c, 64, 5, 3, 1, 0, 65) ==
        static_cast<int>(ErrorCode::kInvalidArgument));
  CHECK(muster_sampler_resume(c, 64, 3, 1, nullptr, &epoch, &consumed) ==
        static_cast<int>(ErrorCode::kInvalidArgument));
  muster_client_free(c);
}
