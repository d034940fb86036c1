// Resumable samplers' progress in the daemon (sampler_commit/sampler_resume,
// issue #24): kept per job for as long as the run's launcher lives, across
// the jobs of its generations and a daemon restart, and dropped with it.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

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

// One generation of a launched job: reserved for `launcher`, this test
// process as its one worker, joined.
std::unique_ptr<Client> generation(const TestDaemon& d, const std::string& job, int64_t launcher,
                                   uint64_t gen) {
  Client booker(ClientOptions{d.endpoint()});
  muster::reserve(booker, job, 1, false, {}, launcher, gen);
  muster::attach(booker, job, {static_cast<int64_t>(::getpid())});
  auto w = std::make_unique<Client>(ClientOptions{d.endpoint()});
  w->join({job, 1, false, 0});
  return w;
}

}  // namespace

TEST_CASE("a commit outlives the run's generations and a daemon restart, and ends with the run",
          "[sampler][resume]") {
  TestDaemon d;
  Process launcher({"sleep", "300"});
  {
    auto w = generation(d, "train", launcher.pid(), 0);
    CHECK_FALSE(w->sampler_resume(1000, 7, true).has_value());
    w->sampler_commit({1000, 2, 7, true, false, 120});
    w->sampler_commit({1000, 2, 7, true, false, 300});  // the last commit wins
    w->sampler_commit({50, 0, 1, false, true, 10});     // another sampler of the run
    w->leave();                                         // the job ends: all its ranks are gone
  }
  auto w = generation(d, "train", launcher.pid(), 1);
  auto p = w->sampler_resume(1000, 7, true);
  REQUIRE(p.has_value());
  CHECK(p->epoch == 2);
  CHECK(p->consumed == 300);
  CHECK_FALSE(p->drop_last);
  // What it answers is ready for sampler_shard: the rest of the epoch.
  CHECK(w->sampler_shard(*p).size() == 700);
  CHECK_FALSE(w->sampler_resume(1000, 8, true).has_value());  // another seed: another sampler

  d.kill9();
  d.start();
  w = std::make_unique<Client>(ClientOptions{d.endpoint()});
  w->join({"train", 1, false, 0});
  p = w->sampler_resume(1000, 7, true);
  REQUIRE(p.has_value());
  CHECK(p->consumed == 300);
  auto other = w->sampler_resume(50, 1, false);
  REQUIRE(other.has_value());
  CHECK((other->epoch == 0 && other->consumed == 10 && other->drop_last));

  // The run ends (its launcher does): a new run under the same id starts fresh.
  launcher.signal(SIGKILL);
  REQUIRE(launcher.wait(10s).has_value());
  CHECK(test::eventually([&] { return !w->sampler_resume(1000, 7, true).has_value(); }, 10s));
  w->leave();
  w = generation(d, "train", ::getpid(), 0);
  CHECK_FALSE(w->sampler_resume(1000, 7, true).has_value());
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
