// Hostile users (issue #42), attack class 1 (in part): job names. Root
// never joins another user's job -- least of all one named by its
// environment (MUSTER_JOB_ID, TORCHELASTIC_RUN_ID), which the other user may
// have prepared; `muster run` makes up names nobody can guess (96 random
// bits) and refuses one outside the job-id charset before anything starts.
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <bitset>
#include <regex>
#include <set>

#include "job_id.hpp"
#include "muster/client.hpp"
#include "protocol/envelope.hpp"
#include "support/as_user.hpp"
#include "support/muster_cli.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace muster::proto;
using namespace std::chrono_literals;
using test::ask;
using test::AsNobody;
using test::kNobody;
using test::Lines;
using test::open_to_everyone;
using test::root;
using test::starts_with;
using test::TestDaemon;

namespace {

// Sets an environment variable for the scope (this test's process only).
struct Env {
  std::string name;
  Env(const std::string& n, const std::string& v) : name(n) { ::setenv(n.c_str(), v.c_str(), 1); }
  ~Env() { ::unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE(
    "hostile: root does not join another user's job from MUSTER_JOB_ID or TORCHELASTIC_RUN_ID") {
  if (!root()) {
    WARN("SKIP: needs root to run a second user (nobody); this test runs as uid " << ::geteuid());
    return;
  }
  TestDaemon d;
  open_to_everyone(d);
  const std::string ep = d.endpoint();
  AsNobody nobody([&](Lines& io) {
    // The attacker's job, with bait in its store, waiting for root's rank.
    io.say(ask(ep, encode(1, Join{"trap", 2, false, ::getpid(), 0})));
    io.say(ask(ep, encode(2, StoreSet{"trap", "config", "INJECTED-BY-UID-65534"})));
    io.hear();
  });
  REQUIRE(starts_with(nobody.hear(), "reply=rank_info"));
  REQUIRE(nobody.hear() == "reply=ok");

  for (const char* var : {"MUSTER_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    INFO(var);
    Env unset_muster("MUSTER_JOB_ID", "");
    Env e(var, "trap");
    Env lws("LOCAL_WORLD_SIZE", "2");
    Client c({ep});
    try {
      c.join_from_env();
      FAIL("root joined uid 65534's job from " << var);
    } catch (const Error& err) {
      CHECK(err.code() == ErrorCode::kPermissionDenied);
      CHECK(std::string(err.what()).find("root does not join another user's job") !=
            std::string::npos);
    }
    CHECK(!c.joined());
  }
  // Nor by the name through the API.
  Client c({ep});
  CHECK_THROWS_AS(c.join({"trap", 2, false, 1}), Error);
  // The slot is still free, the attacker's job as it was; root may still
  // look into it (store_get), which is not joining.
  auto st = c.status();
  REQUIRE(st.jobs.size() == 1);
  CHECK(st.jobs[0].ranks[1].state == "free");
  CHECK(ask(ep, encode(3, StoreGet{"trap", "config", 0})) ==
        "reply=value value=INJECTED-BY-UID-65534");
  nobody.say("done");
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
}
