// Hostile users, attack class 6: a refusal reveals nothing that
// status hides. A job another uid may not see is answered, for every
// request kind that names a job, exactly as a job that does not exist:
// the same code, the same sentence (with the name the sender gave).
#include <catch2/catch.hpp>

#include <unistd.h>

#include "muster/client.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"
#include "protocol/sampler_messages.hpp"
#include "protocol/store_messages.hpp"
#include "support/as_user.hpp"
#include "support/process.hpp"
#include "support/skip.hpp"

using namespace muster;
using namespace muster::proto;
using namespace std::chrono_literals;
using namespace muster::test;

namespace {

// Every local request that names a job and that does not create it, as
// (kind, frame) for the job `job`.
std::vector<std::pair<std::string, std::string>> asks_about(const std::string& job, int64_t self) {
  std::vector<std::pair<std::string, std::string>> v;
  uint64_t id = 1;
  auto add = [&](const char* kind, std::string frame) { v.emplace_back(kind, std::move(frame)); };
  add("status", encode(id++, Status{job}));
  add("leave", encode(id++, Leave{job, self, 0}));
  add("attach", encode(id++, Attach{job, {self}}));
  add("store_set", encode(id++, StoreSet{job, "k", "v"}));
  add("store_get", encode(id++, StoreGet{job, "secret", 0}));
  add("store_add", encode(id++, StoreAdd{job, "n", 1}));
  add("store_compare_set", encode(id++, StoreCompareSet{job, "secret", "", "x"}));
  add("store_delete", encode(id++, StoreDelete{job, "secret"}));
  add("store_wait", encode(id++, StoreWait{job, {"secret"}, 100}));
  add("store_num_keys", encode(id++, StoreNumKeys{job, ""}));
  add("barrier", encode(id++, Barrier{job, 0, "b", 100}));
  add("shard", encode(id++, Shard{job, 0, 10, 0, 0, true, false}));
  add("sampler_commit", encode(id++, SamplerCommit{job, 0, 10, 0, true, false, 0, 1}));
  add("sampler_resume", encode(id++, SamplerResume{job, 10, 0, true}));
  add("cluster_state", encode(id++, ClusterState{job}));
  add("rendezvous",
      encode(id++, Rendezvous{job, "127.0.0.1:1", -1, 1, 1, 0, 1000, "127.0.0.1", 29500}));
  const std::string data(4096, 'x');
  add("bcast_push", encode(id++, BcastPush{job, 0, 1, 0, 4096, 4096, 0, 0, data, 1000}));
  add("bcast_pull", encode(id++, BcastPull{job, 0, 1, 0, 0, 4096, 4096, 0, 0, 1000}));
  add("bcast_leave", encode(id++, BcastLeave{job, 0, 1, 0, 0, 4096, 4096, ""}));
  return v;
}

std::string with_name(std::string line, const std::string& from, const std::string& to) {
  for (size_t at = line.find(from); at != std::string::npos; at = line.find(from, at + to.size()))
    line.replace(at, from.size(), to);
  return line;
}

// As the child: says, for each request of asks_about, its kind, then the
// reply about the hidden job and that about the absent one.
void ask_both(Lines& io, const std::string& ep, const std::string& hidden,
              const std::string& absent) {
  const int64_t self = ::getpid();
  auto a = asks_about(hidden, self), b = asks_about(absent, self);
  for (size_t i = 0; i < a.size(); ++i) {
    io.say(a[i].first);
    io.say(ask(ep, a[i].second, {"", 5s}));
    io.say(ask(ep, b[i].second, {"", 5s}));
  }
}

}  // namespace

TEST_CASE("hostile: a job the sender may not see is refused as one that does not exist") {
  if (!test::root_for()) return;
  test::OpenDaemon d;
  const std::string ep = d.endpoint();
  const std::string hidden = "secret-merger-q3", absent = "no-such-job-q3";
  Client owner({ep});
  owner.join({hidden, 1, false, 0});
  owner.set("secret", "ROOT-API-TOKEN");

  AsNobody nobody([&](Lines& io) {
    ask_both(io, ep, hidden, absent);
    // The requests that would create the job make one of the sender's own
    // (each user's job names are their own): nothing of root's is touched.
    io.say("creates");
    io.say(ask(ep, encode(90, Join{hidden, 1, false, ::getpid(), -1})));
    io.say(ask(ep, encode(91, StoreGet{hidden, "secret", 0})));
    io.say("end");
  });
  for (;;) {
    auto kind = nobody.hear();
    REQUIRE(!kind.empty());
    if (kind == "creates") {
      CHECK(starts_with(nobody.hear(), "reply=rank_info rank=0"));
      auto get = nobody.hear();  // its own new job's store: no secret in it
      INFO("store_get: " << get);
      CHECK(starts_with(get, "error="));
      CHECK(get.find("ROOT-API-TOKEN") == std::string::npos);
      CHECK(nobody.hear() == "end");
      break;
    }
    auto seen = nobody.hear(), none = nobody.hear();
    INFO(kind << ": hidden job: " << seen << " | no job: " << none);
    CHECK(starts_with(none, "error="));
    CHECK(with_name(seen, hidden, absent) == none);
    CHECK(seen.find("uid 0") == std::string::npos);
  }
  // Nothing of root's changed (nobody's own job of that name, made by its
  // join, goes with its process, which may not have ended yet).
  CHECK(owner.get("secret", 1s) == "ROOT-API-TOKEN");
  auto st = owner.status();
  std::erase_if(st.jobs, [](const JobInfo& j) { return j.uid != 0; });
  REQUIRE(st.jobs.size() == 1);
  CHECK(st.jobs[0].ranks[0].pid == ::getpid());
  owner.leave();
}

TEST_CASE("hostile: a second user's job is refused to the attacker as one that does not exist") {
  if (!test::root_for("run two other users")) return;
  test::OpenDaemon d;
  const std::string ep = d.endpoint();
  const std::string hidden = "theirs-q3", absent = "absent-q3";
  // The victim: uid 65533, its job and a secret in its store.
  AsNobody victim(test::holding_job(ep, hidden, 1, "secret", "API-TOKEN-OF-65533", -1),
                  test::kSecondUser);
  REQUIRE(starts_with(victim.hear(), "reply=rank_info"));
  REQUIRE(victim.hear() == "reply=ok");
  AsNobody nobody([&](Lines& io) {
    ask_both(io, ep, hidden, absent);
    io.say("end");
  });
  for (;;) {
    auto kind = nobody.hear();
    REQUIRE(!kind.empty());
    if (kind == "end") break;
    auto seen = nobody.hear(), none = nobody.hear();
    INFO(kind << ": hidden job: " << seen << " | no job: " << none);
    CHECK(with_name(seen, hidden, absent) == none);
    CHECK(seen.find("65533") == std::string::npos);
  }
  // Root reaches it by its key (name~owner), which only root may say.
  CHECK(ask(ep, encode(3, StoreGet{hidden + "~65533", "secret", 0})) ==
        "reply=value value=API-TOKEN-OF-65533");
  victim.say("done");
}
