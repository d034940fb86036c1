// Hostile users (issue #42), attack class 1 (in part): job names. Root
// never joins another user's job by a name alone -- least of all one taken
// from its environment (MUSTER_JOB_ID, TORCHELASTIC_RUN_ID), which the
// other user may have prepared; `muster run` makes up names nobody can
// guess (96 random bits) and refuses one outside the job-id charset before
// anything starts.
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
