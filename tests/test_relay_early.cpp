// A child in the relay tree may hear its World before its parent does: the
// coordinator sends a round's Worlds at once, and at thousands of nodes
// some parents are served last. The child's first barrier or key wait then
// reaches a relay whose job has not formed yet. It must wait there for the
// relay's World, not fail with unknown_job (which failed the child's ranks
// and stalled a 100,000-rank swarm: bench/bench_swarm.cpp).
//
// Node 0 is a real `muster run` (one hello rank) on the relay daemon; node 1
// is this test speaking the peer protocol, so that it can send its barrier
// to the relay before the round closes, which no real daemon could time.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <string>

#include "muster/client.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"
#include "protocol/messages.hpp"
#include "support/as_user.hpp"
#include "support/cluster.hpp"
#include "support/node_join.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::TestDaemon;

namespace {

bool has_job(const TestDaemon& d, const std::string& id) {
  for (const auto& j : Client({d.endpoint()}).status().jobs)
    if (j.id == id) return true;
  return false;
}

}  // namespace

TEST_CASE("a child's barrier that reaches its relay before the relay's World waits for it") {
  const int port = test::free_port();
  const std::string coordinator = "127.0.0.1:" + std::to_string(port);
  TestDaemon coord({"--peer-plain", "--peer-bind", "127.0.0.1", "--peer-port", std::to_string(port),
                    "--tree-width", "1"});
  TestDaemon relay({"--peer-plain", "--peer-bind", "127.0.0.1", "--peer-port", "0"});
  const std::string job = "early";
  test::Process run({test::program("MUSTER_TEST_MUSTER"), "run", "--nnodes", "2", "-n", "1",
                     "--coordinator", coordinator, "--job-id", job, "--node-rank", "0", "--cpu",
                     "--use-env", "--local-addr", "127.0.0.1", test::program("MUSTER_TEST_HELLO"),
                     "--out", relay.runtime_dir() + "/hello.txt"},
                    {{"MUSTER_ENDPOINT", relay.endpoint()}}, true);
  REQUIRE(test::eventually([&] { return has_job(relay, job); }, 20s));

  // Node 1's first barrier, at the relay whose job still forms.
  test::RawClient up(relay.peer_endpoint(), "node-1-up");
  // What a relay never passes on is refused at once, not held.
  auto bad = proto::StoreSet{};
  bad.job = job;
  bad.key = "k";
  bad.value = "v";
  CHECK(up.ask(proto::encode(9, proto::Forward{job, 0, proto::encode(0, bad), true}), 5s)
            .rfind("error=unknown_type", 0) == 0);
  up.send(proto::encode(1, proto::BarrierUp{job, 0, "values-published", 1, 60000, /*relay=*/true}));
  CHECK(up.recv(1500ms) == "no reply");  // held, not refused

  // Node 1 joins: the round closes, the relay hears its World and takes
  // the barrier it held.
  test::RawClient down("tcp://" + coordinator, "node-1");
  const proto::NodeJoin j = test::node_join(job, "node-1", 1);
  const std::string world = down.ask(proto::encode(2, j), 20s);
  INFO(world);
  REQUIRE(world.find("reply=world") == 0);
  CHECK(world.find("node_rank=1") != std::string::npos);

  // The relay takes its children's heartbeats and notices (beats.cpp,
  // notices.cpp): it answers for its formed world, and refuses what no
  // child of a world of 2 nodes could send, changing nothing.
  {
    test::RawClient child(relay.peer_endpoint(), "node-1-beats");
    const auto npos = std::string::npos;
    std::string ack;
    uint64_t id = 20;
    CHECK(test::eventually(
        [&] {
          ack = child.ask(proto::encode(id++, proto::Heartbeat{"node-1", {{job, 0}}, true}), 5s);
          return ack.find("state=running") != npos;
        },
        20s));
    INFO(ack);
    // Of another generation, or with more nodes below than the world has:
    // the child is told to ask the coordinator itself.
    CHECK(child.ask(proto::encode(id++, proto::Heartbeat{"node-1", {{job, 7}}, true}), 5s)
              .find("state=ask_coordinator") != npos);
    proto::JobGeneration ghosts{job, 0};
    for (int i = 0; i < 3; ++i) ghosts.below.push_back({"ghost-" + std::to_string(i), 0});
    CHECK(child.ask(proto::encode(id++, proto::Heartbeat{"node-1", {ghosts}, true}), 5s)
              .find("state=ask_coordinator") != npos);
    // A rank outside the world, more ranks than it has, a job it has no
    // world of: refused (the child then tells the coordinator itself).
    proto::RankExited outside{job, 0, 5, "exited"};
    outside.relay = true;
    CHECK(child.ask(proto::encode(id++, outside), 5s).rfind("error=invalid_argument", 0) == 0);
    proto::RankExited too_many{job, 0, 1, "exited"};
    too_many.also.assign(5, 1);
    too_many.relay = true;
    CHECK(child.ask(proto::encode(id++, too_many), 5s).rfind("error=unavailable", 0) == 0);
    proto::NodeLeave stray{"no-such-job", 0, "node-1"};
    stray.relay = true;
    CHECK(child.ask(proto::encode(id++, stray), 5s).rfind("error=unknown_job", 0) == 0);
  }
  // What hello's rank 1 would do before its barrier: value/1 = 1*1+1, and
  // its arrival counted.
  auto set = proto::StoreSet{};
  set.job = job;
  set.key = "value/1";
  set.value = "2";
  CHECK(down.ask(proto::encode(3, proto::Forward{job, 0, proto::encode(0, set)}), 20s) ==
        "reply=ok");
  CHECK(
      down.ask(proto::encode(
                   6, proto::Forward{job, 0, proto::encode(0, proto::StoreAdd{job, "arrived", 1})}),
               20s)
          .rfind("reply=int", 0) == 0);

  // The held barrier completes with node 0's rank.
  CHECK(up.recv(30s) == "reply=ok");
  up.send(proto::encode(4, proto::BarrierUp{job, 0, "done", 1, 60000, true}));
  CHECK(up.recv(30s) == "reply=ok");
  std::string text = run.read_all(30s);
  INFO(text);
  CHECK(run.wait(10s) == 0);
  CHECK(text.find("2 ranks agreed on the total 3") != std::string::npos);
  (void)down.ask(proto::encode(5, proto::NodeLeave{job, 0, "node-1"}), 5s);
  REQUIRE(test::process_exists(relay.pid()));
}
