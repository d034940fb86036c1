// Which rank is stuck where across nodes (issue #23): a job of 2 nodes x 2
// ranks over two daemons on loopback, the coordinator on the first; ranks
// 0..2 enter a barrier, rank 3 (on the second node) never does. Asked on
// the second node, `muster status --job` shows the job-wide picture from
// the coordinator; plain `muster status` there shows that node's ranks.
#include <catch2/catch.hpp>

#include "stuck_support.hpp"
#include "support/cluster.hpp"

using namespace muster::test;
using namespace std::chrono_literals;

namespace {

// muster run of 2 stuck ranks on daemon `node` of the cluster; global rank
// 3 idles, the others enter barrier 'epoch-3'.
std::unique_ptr<Process> run_node(Cluster& c, int node) {
  auto argv = stuck_run_argv(c.coordinator(), "widejob", 2, node, {"barrier", "epoch-3", "3"});
  return std::make_unique<Process>(
      argv, std::map<std::string, std::string>{{"MUSTER_ENDPOINT", c.daemons[node]->endpoint()}},
      true);
}

}  // namespace

TEST_CASE("status --job on a node that does not coordinate shows the job-wide barrier",
          "[cluster]") {
  Cluster c(2);
  auto node0 = run_node(c, 0);
  auto node1 = run_node(c, 1);
  // Rank 3's pid, from its `rank=3 pid=P` line (under muster run's prefix).
  std::string pid;
  REQUIRE(eventually(
      [&] {
        auto line = node1->read_line(100ms);
        if (line && line->find("rank=3 ") != std::string::npos) pid = fields(*line)["pid"];
        return !pid.empty();
      },
      60s));
  const std::string at1 = c.daemons[1]->endpoint();
  nlohmann::json job;
  // Heartbeats (every peer_timeout/4) carry each node's part to the coordinator.
  REQUIRE(eventually(
      [&] {
        auto r = muster_status(at1, {"--json", "--job", "widejob"});
        if (r.rc != 0) return false;
        job = job_of(r.out, "widejob");
        return job["waits_job_wide"] == true && job["waits"].size() == 1 &&
               job["waits"][0]["arrived"] == 3;
      },
      60s));
  INFO(job.dump());
  auto w = job["waits"][0];
  CHECK(w["name"] == "epoch-3");
  CHECK(w["expected"] == 4);
  REQUIRE(w["missing"].size() == 1);
  CHECK(w["missing"][0]["rank"] == 3);
  CHECK(w["missing"][0]["node"] == 1);
  CHECK(std::to_string(w["missing"][0]["pid"].get<int64_t>()) == pid);

  auto human = muster_status(at1, {"--job", "widejob"});
  INFO(human.out);
  CHECK(human.rc == 0);
  CHECK(human.out.find("waits (whole job, from its coordinator):") != std::string::npos);
  CHECK(human.out.find("barrier 'epoch-3': 3/4, waiting for rank 3 (node 1, pid " + pid + ")") !=
        std::string::npos);

  // Without --job, the node shows its own ranks only: 1 of its 2 arrived.
  auto local = job_of(muster_status(at1, {"--json"}).out, "widejob");
  CHECK(local["waits_job_wide"] == false);
  REQUIRE(local["waits"].size() == 1);
  CHECK(local["waits"][0]["arrived"] == 1);
  CHECK(local["waits"][0]["expected"] == 2);
  REQUIRE(local["waits"][0]["missing"].size() == 1);
  CHECK(local["waits"][0]["missing"][0]["rank"] == 3);

  // An unknown job is refused on this node too.
  auto nope = muster_status(at1, {"--job", "nope"});
  CHECK(nope.rc == 2);
}
