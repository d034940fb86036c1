// Broadcasts go node to node along a chain when every node's daemon listens
// (daemon/cluster/chain_broadcasts.cpp): a node daemon then serves chunks to
// whatever reaches its peer port claiming to be the next node. Node 0 is a
// real `muster run` (one rank that sleeps) on its daemon; node 1 is this
// test speaking the peer protocol, so that it can send what no real daemon
// would: pulls as the wrong node, without `shared`, naming a pool, for a
// root it holds itself, too far ahead, twice for one chunk, for another
// broadcast's shape. Each is refused with a code and changes nothing; a
// fair pull waits for its chunk and fails, with the broadcast, when node
// 1 gives up.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "muster/client.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"
#include "support/as_user.hpp"
#include "support/cluster.hpp"
#include "support/node_join.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::TestDaemon;

TEST_CASE("a node daemon serves chain pulls to the next node only; hostile ones change nothing") {
  const int port = test::free_port();
  const std::string coordinator = "127.0.0.1:" + std::to_string(port);
  TestDaemon coord(
      {"--peer-plain", "--peer-bind", "127.0.0.1", "--peer-port", std::to_string(port)});
  TestDaemon node0({"--peer-plain", "--peer-bind", "127.0.0.1", "--peer-port", "0"});
  const std::string job = "chain-peer";
  test::Process run({test::program("MUSTER_TEST_MUSTER"), "run", "--nnodes", "2", "-n", "1",
                     "--coordinator", coordinator, "--job-id", job, "--node-rank", "0", "--cpu",
                     "--use-env", "--local-addr", "127.0.0.1", "/bin/sleep", "60"},
                    {{"MUSTER_ENDPOINT", node0.endpoint()}}, true);
  // Node 1 joins, listening (as far as the coordinator knows): a chain.
  test::RawClient down("tcp://" + coordinator, "node-1");
  proto::NodeJoin j = test::node_join(job, "node-1", 1);
  j.peer_endpoint = "127.0.0.1:9";
  j.chain = true;
  const std::string world = down.ask(proto::encode(2, j), 30s);
  REQUIRE(world.find("reply=world") == 0);

  test::RawClient up(node0.peer_endpoint(), "node-1-chain");
  uint64_t id = 100;
  const uint64_t chunk = uint64_t{4} << 20, size = 40 * chunk;  // window: 8 chunks
  auto pull = [&](uint32_t node, uint64_t index, uint64_t have) {
    proto::BcastPull m;
    m.job = job, m.generation = 0, m.seq = 1, m.root = 0, m.node_rank = node;
    m.size = size, m.chunk = chunk, m.index = index, m.have = have, m.timeout_ms = 60000;
    m.shared = true;
    return m;
  };
  auto ask = [&](const proto::BcastPull& m) {
    return up.ask(proto::encode(id++, proto::Forward{job, 0, proto::encode(0, m), true}), 5s);
  };
  // Node 0's world may still be on its way: its pulls are held until then.
  std::string as_self;
  REQUIRE(test::eventually(
      [&] {
        as_self = ask(pull(0, 0, 0));
        return as_self != "no reply";
      },
      20s));
  INFO(as_self);
  CHECK(as_self.rfind("error=permission_denied", 0) == 0);  // node 0 does not pull from itself
  auto unshared = pull(1, 0, 0);
  unshared.shared = false;
  CHECK(ask(unshared).rfind("error=invalid_argument", 0) == 0);
  auto pooled = pull(1, 0, 0);
  pooled.pool.fd = 3;
  CHECK(ask(pooled).rfind("error=invalid_argument", 0) == 0);
  auto root_here = pull(1, 0, 0);
  root_here.root = 1;  // node 1's own rank: node 0 is the chain's last
  CHECK(ask(root_here).find("the root: it pulls nothing") != std::string::npos);
  CHECK(ask(pull(1, 16, 0)).rfind("error=too_large", 0) == 0);  // 2 windows ahead
  // A fair pull waits for its chunk (the root pushed none).
  const uint64_t fair = id;
  up.send(proto::encode(id++, proto::Forward{job, 0, proto::encode(0, pull(1, 0, 0)), true}));
  CHECK(up.recv(1s) == "no reply");
  CHECK(ask(pull(1, 0, 0)).rfind("error=conflict", 0) == 0);  // the same chunk twice
  auto other = pull(1, 1, 0);
  other.size = size + 1;  // another shape of the same broadcast
  CHECK(ask(other).rfind("error=invalid_argument", 0) == 0);
  // A later broadcast may not start from the next node's word while this
  // one is under way here (it would abandon it).
  auto later = pull(1, 0, 0);
  later.seq = 1000;
  CHECK(ask(later).rfind("error=conflict", 0) == 0);
  // Another job inside node 1's Forward, garbage inside it.
  auto stray = pull(1, 0, 0);
  stray.job = "other";
  CHECK(up.ask(proto::encode(id++, proto::Forward{job, 0, proto::encode(0, stray), true}), 5s)
            .rfind("error=permission_denied", 0) == 0);
  CHECK(
      up.ask(proto::encode(id++, proto::Forward{job, 0, std::string("\x94\x01\x0e", 3), true}), 5s)
          .rfind("error=", 0) == 0);
  // Node 1 gives up: the reply, then the waiting pull fails with the
  // broadcast, which stays failed.
  proto::BcastLeave leave{job, 0, 1, 0, 1, size, chunk, "test gave up"};
  up.send(proto::encode(id++, proto::Forward{job, 0, proto::encode(0, leave), true}));
  std::map<uint64_t, std::string> got;
  for (int i = 0; i < 2; ++i) {
    auto f = up.recv_frame(10s);
    REQUIRE(f);
    got[proto::decode_envelope(f->data(), f->size()).request_id] = test::describe(*f);
  }
  INFO(got[fair]);
  CHECK(got[fair].rfind("error=peer_exited", 0) == 0);
  CHECK(got[id - 1] == "reply=ok");
  CHECK(ask(pull(1, 1, 0)).rfind("error=peer_exited", 0) == 0);
  // The daemon is well, and so is its job.
  auto st = Client({node0.endpoint()}).status();
  bool found = false;
  for (const auto& jb : st.jobs) found |= jb.id == job;
  CHECK(found);
  run.signal(SIGTERM);
  run.wait(10s);
}
