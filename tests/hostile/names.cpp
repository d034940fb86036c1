// Hostile users, attack class 1: job names. Each user's job names are their
// own namespace: a name another user took first is still free to everyone
// else, root's rank joins root's job whatever its environment names, and
// root reaches another user's job only by naming its owner (--owner, the
// owner argument); `muster run` makes up names nobody can guess (96 random
// bits) and refuses one outside the job-id charset before anything starts.
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <bitset>
#include <map>
#include <regex>
#include <set>

#include "job_id.hpp"
#include "muster/client.hpp"
#include "protocol/envelope.hpp"
#include "support/as_user.hpp"
#include "support/cluster.hpp"
#include "support/error_code.hpp"
#include "support/muster_cli.hpp"
#include "support/process.hpp"
#include "support/skip.hpp"

using namespace muster;
using namespace muster::proto;
using namespace std::chrono_literals;
using namespace muster::test;

namespace {

// Sets an environment variable for the scope (this test's process only).
struct Env {
  std::string name;
  Env(const std::string& n, const std::string& v) : name(n) { ::setenv(n.c_str(), v.c_str(), 1); }
  ~Env() { ::unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("hostile: a name another user took first is root's and a second user's too") {
  if (!test::root_for()) return;
  test::OpenDaemon d;
  const std::string ep = d.endpoint();
  // The squatter: takes the name first and leaves bait in its store.
  AsNobody nobody([&](Lines& io) {
    io.say(ask(ep, encode(1, Join{"train42", 2, false, ::getpid(), 0})));
    io.say(ask(ep, encode(2, StoreSet{"train42", "config", "INJECTED-BY-UID-65534"})));
    io.hear();
    io.say(ask(ep, encode(3, StoreGet{"train42", "config", 0})));
    io.say(ask(ep, encode(4, Status{})));
  });
  REQUIRE(starts_with(nobody.hear(), "reply=rank_info"));
  REQUIRE(nobody.hear() == "reply=ok");
  // A second user's train42 is its own job, with its own (empty) store.
  AsNobody second(test::holding_job(ep, "train42", 1, "config", "second"), test::kSecondUser);
  CHECK(second.hear() == "reply=rank_info rank=0 generation=0");
  CHECK(second.hear() == "reply=ok");
  // Root's too: a job of one rank, not the squatter's of two, and its store
  // holds no bait.
  Client c({ep});
  auto me = c.join({"train42", 1, false, 0});
  CHECK(me.job == "train42");
  CHECK(me.world_size == 1);
  CHECK_THROWS_AS(c.get("config", std::chrono::milliseconds(0)), Error);
  c.set("config", "root's");
  // Root sees three jobs of that name, each with its owner.
  auto st = c.status();
  std::multiset<std::pair<std::string, int64_t>> jobs;
  for (const auto& j : st.jobs) jobs.insert({j.id, j.uid});
  CHECK(jobs == std::multiset<std::pair<std::string, int64_t>>{
                    {"train42", 0}, {"train42", test::kSecondUser}, {"train42", test::kNobody}});
  // The squatter's store is as it was; it sees its one job.
  nobody.say("go");
  CHECK(nobody.hear() == "reply=value value=INJECTED-BY-UID-65534");
  CHECK(starts_with(nobody.hear(), "reply=status_reply jobs=train42/uid=65534/"));
  second.say("done");
}

TEST_CASE("hostile: root's rank joins its own job whatever its environment names") {
  if (!test::root_for()) return;
  test::OpenDaemon d;
  const std::string ep = d.endpoint();
  // The attacker's job, with bait in its store, waiting for root's rank.
  AsNobody nobody(test::holding_job(ep, "trap", 2, "config", "INJECTED-BY-UID-65534"));
  REQUIRE(starts_with(nobody.hear(), "reply=rank_info"));
  REQUIRE(nobody.hear() == "reply=ok");

  for (const char* var : {"MUSTER_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    INFO(var);
    Env unset_muster("MUSTER_JOB_ID", "");
    Env e(var, "trap");
    Env lws("LOCAL_WORLD_SIZE", "2");
    Client c({ep});
    auto me = c.join_from_env();
    CHECK(me.job == "trap");
    CHECK(me.world_size == 2);
    CHECK_THROWS_AS(c.get("config", std::chrono::milliseconds(0)), Error);
    c.leave();
  }
  // An owner in root's environment names the attacker's job, but root's
  // process is no worker its launcher registered: refused.
  {
    Env e("MUSTER_JOB_ID", "trap");
    Env o("MUSTER_JOB_OWNER", std::to_string(test::kNobody));
    Env lws("LOCAL_WORLD_SIZE", "2");
    Client c({ep});
    CHECK_THAT(outcome([&] { c.join_from_env(); }),
               Catch::StartsWith("permission_denied: ") &&
                   Catch::Contains("only from a process its launcher registered"));
    CHECK(!c.joined());
  }
  // The attacker's second slot is still free, its job as it was.
  Client c({ep});
  auto st = c.status();
  bool seen = false;
  for (const auto& j : st.jobs)
    if (j.uid == static_cast<int64_t>(test::kNobody)) {
      seen = true;
      CHECK(j.ranks[1].state == "free");
    }
  CHECK(seen);
  nobody.say("done");
}

TEST_CASE("hostile: only root names another owner's job, and only by saying so") {
  if (!test::root_for()) return;
  test::OpenDaemon d;
  const std::string ep = d.endpoint();
  Client c({ep});
  c.join({"mine", 1, false, 0});
  c.set("secret", "ROOT-API-TOKEN");
  // A request naming its job twice: the second never reaches a handler.
  codec::Buffer twice;
  codec::Packer pk(twice);
  pk.pack_map(4);
  for (const char* job : {"mine", "mine~65533"}) {
    pk.pack(std::string("job"));
    pk.pack(std::string(job));
  }
  pk.pack(std::string("key"));
  pk.pack(std::string("secret"));
  pk.pack(std::string("timeout_ms"));
  pk.pack(0);
  const std::string doubled = encode_raw(7, static_cast<uint16_t>(MsgType::kStoreGet), twice);
  AsNobody nobody([&](Lines& io) {
    Join j{"mine", 1, false, ::getpid(), -1};
    j.owner = 0;
    io.say(ask(ep, doubled));
    io.say(ask(ep, encode(1, j)));                                 // an owner field
    io.say(ask(ep, encode(2, StoreGet{"mine~0", "secret", 0})));   // a key: no uid 0
    io.say(ask(ep, encode(3, StoreGet{"x~65533", "secret", 0})));  // another's key
    io.say(ask(ep, encode(4, StoreGet{"mine", "secret", 0})));     // its own "mine"
  });
  CHECK(nobody.hear() == "error=bad_message the request names 'job' twice");
  CHECK(
      starts_with(nobody.hear(), "error=permission_denied only root may name another user's job"));
  CHECK(starts_with(nobody.hear(), "error=invalid_argument"));
  CHECK(starts_with(nobody.hear(), "error=invalid_argument"));
  CHECK(nobody.hear() == "error=unknown_job no job 'mine' on this daemon");
  // Root reaches nobody's job by its key (as `muster run --owner` does
  // after its reserve), but never creates or joins by a key.
  AsNobody owner(test::holding_job(ep, "theirs", 1, "k", "v"));
  REQUIRE(starts_with(owner.hear(), "reply=rank_info"));
  REQUIRE(owner.hear() == "reply=ok");
  CHECK(ask(ep, encode(5, StoreGet{"theirs~65534", "k", 0})) == "reply=value value=v");
  CHECK(starts_with(ask(ep, encode(6, Join{"theirs~65534", 1, false, ::getpid(), -1})),
                    "error=invalid_argument"));
  owner.say("done");
}

TEST_CASE("hostile: muster run --owner runs root's workers in that user's job, and only root") {
  if (!test::root_for()) return;
  test::OpenDaemon d;
  std::map<std::string, std::string> env{{"MUSTER_ENDPOINT", d.endpoint()}};
  test::Process run(
      test::muster_cmd("run", {"--owner", std::to_string(test::kNobody), "--rdzv-id", "owned",
                               "--nproc-per-node", "2", "--cpu", "--no-prefix",
                               test::program("MUSTER_TEST_RANK"), "env"}),
      env, true);
  auto text = run.read_all(30s);
  INFO(text);
  CHECK(run.wait(10s).value_or(-1) == 0);
  CHECK(text.find("rank=0 local_rank=0 world_size=2 job=owned~65534") != std::string::npos);
  CHECK(text.find("rank=1 local_rank=1 world_size=2 job=owned~65534") != std::string::npos);
  // Without --owner the same id is root's own job.
  test::Process own(
      test::muster_cmd("run", {"--rdzv-id", "owned", "--nproc-per-node", "1", "--cpu",
                               "--no-prefix", test::program("MUSTER_TEST_RANK"), "env"}),
      env, true);
  auto own_text = own.read_all(30s);
  INFO(own_text);
  CHECK(own.wait(10s).value_or(-1) == 0);
  CHECK(own_text.find("job=owned\n") != std::string::npos);
  // Another user may not say --owner for anyone but itself (exit 2, usage).
  AsNobody nobody([&](Lines& io) {
    test::Process p(test::muster_cmd("run", {"--owner", "0", "--rdzv-id", "x", "--cpu", "true"}),
                    env, true);
    auto t = p.read_all(20s);
    io.say(std::to_string(p.wait(10s).value_or(-1)) + " " +
           (t.find("--owner: only root") != std::string::npos ? "said" : t));
  });
  CHECK(nobody.hear() == "2 said");
}

TEST_CASE("hostile: generated job ids carry 96 random bits") {
  std::set<std::string> seen;
  std::regex form("job-[0-9a-f]{24}");
  size_t ones = 0;
  for (int i = 0; i < 2000; ++i) {
    auto id = random_job_id();
    REQUIRE(std::regex_match(id, form));
    seen.insert(id);
    for (size_t k = 4; k < id.size(); ++k)
      ones +=
          std::bitset<4>(static_cast<unsigned>(std::stoi(id.substr(k, 1), nullptr, 16))).count();
  }
  CHECK(seen.size() == 2000);
  // 2000 x 96 bits, half of them ones: 96000 +- 4 sigma (sigma ~ 219).
  CHECK(ones > 96000 - 900);
  CHECK(ones < 96000 + 900);

  // What `muster run` hands its workers when no --rdzv-id is given.
  std::set<std::string> runs;
  for (int i = 0; i < 2; ++i) {
    auto r = test::run_embedded(
        {"--nproc-per-node", "1", "--no-prefix", "sh", "-c", "echo ID=$MUSTER_JOB_ID"});
    INFO(r.text);
    REQUIRE(r.code == 0);
    std::smatch m;
    REQUIRE(std::regex_search(r.text, m, std::regex("ID=(job-[0-9a-f]{24})\n")));
    runs.insert(m[1]);
  }
  CHECK(runs.size() == 2);
}

TEST_CASE(
    "hostile: an --rdzv-id outside the job-id charset is a usage error before anything starts") {
  test::TempDir t;
  const std::string marker = t.path() + "/started";
  for (std::string bad :
       {std::string("bad id"), std::string("a/b"), std::string("\x1b[2J"), std::string(129, 'x')}) {
    auto r = test::run_embedded({"--rdzv-id", bad, "--nproc-per-node", "1", "touch", marker});
    INFO(bad << ": " << r.text);
    CHECK(r.code == 2);
    CHECK(r.text.find("--rdzv-id: job id") != std::string::npos);
    CHECK(::access(marker.c_str(), F_OK) != 0);
  }
  CHECK(job_id_problem("train42").empty());
  CHECK(job_id_problem("1234.0").empty());
  CHECK(!job_id_problem("").empty());
  // The longest name with the largest uid is a key that fits the wire's
  // 128 bytes; one byte more is no name. A key is no name either.
  const std::string longest(117, 'x');
  CHECK(job_id_problem(longest).empty());
  CHECK(!job_id_problem(longest + "x").empty());
  CHECK(job_key(4294967295LL, longest).size() == 128);
  CHECK(job_key_problem(job_key(4294967295LL, longest)).empty());
  CHECK(!job_id_problem("train42~1000").empty());
  CHECK(!job_key_problem("train42~").empty());
  CHECK(!job_key_problem("train42~01").empty());
  CHECK(job_name("train42~1000") == "train42");
  CHECK(job_key_owner("train42~1000") == 1000);
  CHECK(job_key(0, "train42") == "train42");
}

TEST_CASE("hostile: two users' jobs of one name span the same nodes as two jobs", "[cluster]") {
  if (!test::root_for()) return;
  // Two node daemons, the first coordinating; both users run "train42" on
  // both nodes at once. The coordinator keys each job by the owner its node
  // daemon vouches for: two worlds of 4, neither refused, neither merged.
  test::Cluster c(2);
  for (auto& d : c.daemons) open_to_everyone(*d);
  AsNobody nobody([&](Lines& io) {
    auto a = c.run(0, "train42", "2"), b = c.run(1, "train42", "2");
    auto ta = a->read_all(60s), tb = b->read_all(60s);
    int ca = a->wait(10s).value_or(-1), cb = b->wait(10s).value_or(-1);
    io.say(std::to_string(ca) + " " + std::to_string(cb));
    io.say(std::to_string(test::by_worker(ta).size() + test::by_worker(tb).size()));
    std::map<std::string, std::string> f;
    for (auto& [prefix, lines] : test::by_worker(ta))
      for (auto& l : lines)
        for (auto& [k, v] : test::fields(l)) f[k] = v;
    io.say("world=" + f["world"] + " store=" + f["store"]);
  });
  auto a = c.run(0, "train42", "2"), b = c.run(1, "train42", "2");
  auto ta = a->read_all(60s), tb = b->read_all(60s);
  INFO("root's node 0:\n" << ta << "\nroot's node 1:\n" << tb);
  CHECK(a->wait(10s) == 0);
  CHECK(b->wait(10s) == 0);
  std::map<std::string, std::string> merged;
  for (auto& [prefix, lines] : test::by_worker(ta))
    for (auto& l : lines)
      for (auto& [k, v] : test::fields(l)) merged[k] = v;
  CHECK(merged["world"] == "4");
  CHECK(merged["store"] == "ok");
  CHECK(nobody.hear(90s) == "0 0");
  CHECK(nobody.hear() == "4");
  CHECK(nobody.hear() == "world=4 store=ok");
}

TEST_CASE("hostile: root tells two users' jobs of one name apart: muster gpu list --owner") {
  if (!test::root_for()) return;
  test::OpenDaemon d({"--simulate-gpus", "2"});
  const std::string ep = d.endpoint();
  AsNobody nobody([&](Lines& io) {
    io.say(ask(ep, encode(1, Join{"train42", 1, true, ::getpid(), 0})));
    io.hear();
  });
  REQUIRE(starts_with(nobody.hear(), "reply=rank_info"));
  Client c({ep});
  c.join({"train42", 1, true, 0});
  std::map<std::string, std::string> env{{"MUSTER_ENDPOINT", ep}};
  auto list = [&](std::vector<std::string> args) {
    test::Process p(test::muster_cmd("gpu", std::move(args)), env, true);
    auto text = p.read_all(20s);
    return std::make_pair(p.wait(10s).value_or(-1), text);
  };
  auto [all_rc, all] = list({"list"});
  INFO(all);
  CHECK(all_rc == 0);
  CHECK(all.find("train42 (uid 65534)") != std::string::npos);  // root's own: no uid
  auto [rc, theirs] = list({"list", "--owner", std::to_string(test::kNobody)});
  INFO(theirs);
  CHECK(rc == 0);
  CHECK(theirs.find("train42 (uid 65534)") != std::string::npos);
  CHECK(theirs.find(std::to_string(::getpid())) == std::string::npos);  // root's rank's pid
  auto [bad_rc, bad] = list({"list", "--owner", "no-such-user-q3"});
  CHECK(bad_rc == 2);
  nobody.say("done");
}
