// Attacks by another local user (nobody, 65534) on root's jobs through a
// private musterd (issue #13): the multi-node requests (rendezvous,
// cluster_state, bcast_*) naming a job of another uid, another uid's view of
// status, and a routing id reused by another uid (the reply cache's
// answers, a live connection). Each attack must be refused at once with
// permission_denied (not time out), and root's job and store, read back by
// root, must be as before. They need a second user: they run as root, which
// forks a child that drops to nobody; elsewhere they are skipped with a
// warning.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <thread>
#include <vector>

#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"
#include "support/as_user.hpp"
#include "support/cluster.hpp"
#include "support/process.hpp"
#include "support/skip.hpp"

using namespace muster;
using namespace muster::proto;
using namespace muster::test;
using namespace std::chrono_literals;

namespace {

// A refusal comes at once: waiting longer than this is a failure.
const AskOptions kQuick{"", 3s};

// What the owner check says to nobody about root's job: what it would say
// if there were none (issue #42: a refusal reveals nothing status hides).
constexpr const char* kNotYours = "error=unknown_job no job 'owned' on this daemon";

void check_refused(const std::string& what, const std::string& line) {
  INFO(what << ": " << line);
  CHECK(line == kNotYours);
}

// A daemon that can take part in multi-node jobs and coordinates them
// itself: a job of one node whose world forms through its own peer port.
struct PeeringDaemon {
  int port = free_port();
  TestDaemon d{{"--peer-plain", "--peer-timeout", "2", "--peer-bind", "127.0.0.1", "--peer-port",
                std::to_string(port)}};
  std::string coordinator() const { return "127.0.0.1:" + std::to_string(port); }
};

Rendezvous one_node(const std::string& job, const std::string& coordinator) {
  return Rendezvous{job, coordinator, -1, 1, 1, 0, 10000, "127.0.0.1", 29500};
}

// Root books job 'owned' (one rank, no GPU) held by this process.
void reserve_owned(const std::string& ep) {
  REQUIRE(ask(ep, encode(900, Reserve{"owned", 1, false, {}, ::getpid()})) == "reply=reserved");
}

// A routing id of the kind libmuster picks: 16 bytes, the first not zero.
const std::string kRoutingId = [] {
  std::string id = "m";
  for (char c = 1; c < 16; ++c) id += c;
  return id;
}();

// Once nobody's connection ended (200 ms): root's counter n of "owned" is
// still 1, and root's client still gets its own answer to `add` (its
// store_add of 1) again without the add being applied twice.
void check_applied_once(const std::string& ep, const std::string& add) {
  std::this_thread::sleep_for(200ms);
  CHECK(ask(ep, encode(5, StoreGet{"owned", "n", 0})) == "reply=value value=1");
  CHECK(ask(ep, add, {.routing_id = kRoutingId}) == "reply=int value=1");
  CHECK(ask(ep, encode(6, StoreGet{"owned", "n", 0})) == "reply=value value=1");
}

// Nobody's side of a takeover: a DEALER with root's routing id. With ping,
// one request on it first ("ping: REPLY"); without, it sends nothing and
// says "connected" once its handshake is surely done. Then, once root set
// the key, every frame it receives within 1.5 s ("got: REPLY"), and "end".
void thief(Lines& io, const std::string& ep, bool ping) {
  RawClient t(ep, kRoutingId);
  if (ping) {
    io.say("ping: " + t.ask(encode(1, Ping{}), 1s));
  } else {
    std::this_thread::sleep_for(300ms);
    io.say("connected");
  }
  io.hear();  // root sets the key
  auto end = std::chrono::steady_clock::now() + 1500ms;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    if (auto f = t.recv_frame(left)) io.say("got: " + describe(*f));
  }
  io.say("end");
}

// What the thief received after "collect".
std::vector<std::string> thief_got(AsNobody& nobody) {
  nobody.say("collect");
  std::vector<std::string> got;
  for (;;) {
    auto line = nobody.hear(5s);
    if (line == "end" || line.empty()) return got;
    got.push_back(line);
  }
}

}  // namespace

TEST_CASE("another uid cannot start a rendezvous for a job it does not own", "[access]") {
  if (!root_for()) return;
  PeeringDaemon p;
  open_to_everyone(p.d);
  const std::string ep = p.d.endpoint();
  reserve_owned(ep);
  // A coordinator nobody listens at: root's job would hang "forming".
  const std::string dead = "127.0.0.1:" + std::to_string(free_port());

  AsNobody nobody([&](Lines& io) { io.say(ask(ep, encode(1, one_node("owned", dead)), kQuick)); });
  check_refused("rendezvous", nobody.hear());

  // Root's job is in no rendezvous: still a single-node job, and root's own
  // rendezvous forms its world.
  CHECK(ask(ep, encode(2, ClusterState{"owned"})) ==
        "reply=cluster_state_reply job=owned generation=0 state=running message=a single-node job");
  auto world = ask(ep, encode(3, one_node("owned", p.coordinator())));
  INFO("root's rendezvous: " << world);
  CHECK(starts_with(world, "reply=world "));
  CHECK(world.find(" num_nodes=1 world_size=1") != std::string::npos);
}

TEST_CASE("another uid cannot read the cluster state of a job it does not own", "[access]") {
  if (!root_for()) return;
  PeeringDaemon p;
  open_to_everyone(p.d);
  const std::string ep = p.d.endpoint();
  reserve_owned(ep);
  REQUIRE(starts_with(ask(ep, encode(1, one_node("owned", p.coordinator()))), "reply=world "));
  const std::string before = ask(ep, encode(2, ClusterState{"owned"}));
  REQUIRE(starts_with(before, "reply=cluster_state_reply job=owned "));
  REQUIRE(before.find(" state=running ") != std::string::npos);

  AsNobody nobody([&](Lines& io) { io.say(ask(ep, encode(3, ClusterState{"owned"}), kQuick)); });
  check_refused("cluster_state", nobody.hear());
  CHECK(ask(ep, encode(4, ClusterState{"owned"})) == before);
}

TEST_CASE("another uid cannot push, pull or leave a broadcast of a job it does not own",
          "[access]") {
  if (!root_for()) return;
  PeeringDaemon p;
  open_to_everyone(p.d);
  const std::string ep = p.d.endpoint();
  reserve_owned(ep);
  // Root's job spans "nodes" (one, through the peer port): broadcasts are
  // relayed by the coordinator.
  auto world = ask_frame(ep, encode(1, one_node("owned", p.coordinator())));
  REQUIRE(world);
  INFO("root's rendezvous: " << describe(*world));
  auto env = decode_envelope(world->data(), world->size());
  REQUIRE(env.type == static_cast<uint16_t>(MsgType::kWorld));
  const uint64_t gen = World::unpack(env.payload).generation;

  constexpr uint64_t kChunk = 4096;
  const std::string data(kChunk, 'x');
  const BcastPush push{"owned", gen, 1, 0, kChunk, kChunk, 0, 0, data, 1000};
  const BcastPull pull{"owned", gen, 1, 0, 0, kChunk, kChunk, 0, 0, 1000};
  const BcastLeave leave{"owned", gen, 1, 0, 0, kChunk, kChunk, ""};
  AsNobody nobody([&](Lines& io) {
    io.say(ask(ep, encode(2, push), kQuick));
    io.say(ask(ep, encode(3, pull), kQuick));
    io.say(ask(ep, encode(4, leave), kQuick));
  });
  for (const char* name : {"bcast_push", "bcast_pull", "bcast_leave"})
    check_refused(name, nobody.hear());

  // No broadcast of root's job happened: none finished (the coordinator
  // counts the bytes of each in the store), and root's own broadcast 1 runs.
  CHECK(starts_with(ask(ep, encode(5, StoreGet{"owned", "muster/bcast/relayed", 0})),
                    "error=not_found "));
  CHECK(ask(ep, encode(6, push)) == "reply=ok");
  CHECK(ask(ep, encode(7, leave)) == "reply=ok");
  CHECK(ask(ep, encode(8, StoreGet{"owned", "muster/bcast/relayed", 0})) == "reply=value value=0");
}

TEST_CASE("status shows another uid's jobs to root and their owner only", "[access]") {
  if (!root_for()) return;
  test::OpenDaemon d({"--simulate-gpus", "3"});
  const std::string ep = d.endpoint();
  const int64_t root_pid = ::getpid();
  // Root's job holds GPU 0, joined by this process.
  REQUIRE(starts_with(ask(ep, encode(1, Join{"rootjob", 1, true, root_pid, -1})),
                      "reply=rank_info rank=0"));

  AsNobody nobody([&](Lines& io) {
    // Nobody's own job holds GPU 1.
    io.say(ask(ep, encode(2, Reserve{"nobodyjob", 1, true, {}, ::getpid()})));
    auto st = ask_frame(ep, encode(3, Status{}));
    io.say(st ? hex(*st) : "no reply");
    io.hear();  // holds its job until root has looked
  });
  REQUIRE(nobody.hear() == "reply=reserved");
  const auto line = nobody.hear();
  REQUIRE(line != "no reply");
  const StatusReply theirs = status_of(unhex(line));
  INFO("nobody's view: " << describe_status(theirs));
  // Nobody sees its own job, with its uid, and not root's.
  REQUIRE(theirs.jobs.size() == 1);
  CHECK(theirs.jobs[0].id == "nobodyjob");
  CHECK(theirs.jobs[0].uid == static_cast<int64_t>(kNobody));
  REQUIRE(theirs.jobs[0].ranks.size() == 1);
  CHECK(theirs.jobs[0].ranks[0].device == 1);
  // Root's GPU is in use by someone; who holds it is not nobody's to know.
  REQUIRE(theirs.devices.size() == 3);
  CHECK(theirs.devices[0] == DeviceStatus{0, theirs.devices[0].name, "", -1, 0, true});
  CHECK(theirs.devices[1].job == "nobodyjob");
  CHECK(theirs.devices[1].rank == 0);
  CHECK(theirs.devices[1].in_use);
  CHECK(theirs.devices[2] == DeviceStatus{2, theirs.devices[2].name, "", -1, 0, false});
  for (const auto& dev : theirs.devices) CHECK(dev.pid != root_pid);

  // Root sees everything, owners included.
  auto frame = ask_frame(ep, encode(4, Status{}));
  REQUIRE(frame);
  const StatusReply all = status_of(*frame);
  INFO("root's view: " << describe_status(all));
  REQUIRE(all.jobs.size() == 2);
  for (const auto& j : all.jobs) {
    INFO(j.id);
    REQUIRE(j.ranks.size() == 1);
    if (j.id == "rootjob") {
      CHECK(j.uid == 0);
      CHECK(j.ranks[0].pid == root_pid);
      CHECK(j.ranks[0].device == 0);
      CHECK(j.ranks[0].state == "joined");
    } else {
      CHECK(j.id == "nobodyjob");
      CHECK(j.uid == static_cast<int64_t>(kNobody));
      CHECK(j.ranks[0].device == 1);
    }
  }
  REQUIRE(all.devices.size() == 3);
  DeviceStatus roots{0, all.devices[0].name, "rootjob", 0, root_pid, true};
  roots.owner = 0;  // the holder's name and its owner: two users' names may be alike
  CHECK(all.devices[0] == roots);
  CHECK(all.devices[1].job == "nobodyjob");
  CHECK(all.devices[1].owner == static_cast<int64_t>(kNobody));
  CHECK(all.devices[1].in_use);
  CHECK(all.devices[1] == theirs.devices[1]);  // nobody saw its own GPU in full
  CHECK(!all.devices[2].in_use);
  nobody.say("done");
}

TEST_CASE("another uid reusing a client's routing id does not get its cached replies", "[access]") {
  if (!root_for()) return;
  test::OpenDaemon d;
  const std::string ep = d.endpoint();
  reserve_owned(ep);
  // Root's client adds 1 to a counter, gets its answer and goes away.
  const std::string add = encode(4242, StoreAdd{"owned", "n", 1});
  {
    RawClient c(ep, kRoutingId);
    REQUIRE(c.ask(add) == "reply=int value=1");
  }
  std::this_thread::sleep_for(200ms);  // the daemon sees the connection end

  // Nobody, who learned the routing id, sends the very same bytes.
  {
    AsNobody nobody([&](Lines& io) {
      RawClient c(ep, kRoutingId);
      io.say(c.ask(add, 3s));
      io.say(c.ask(encode(1, Ping{}), 3s));
    });
    auto stolen = nobody.hear();
    INFO("nobody's copy of root's store_add: " << stolen);
    CHECK(starts_with(stolen, "error=permission_denied "));
    // Whatever it sends under root's routing id: refused, never served.
    auto ping = nobody.hear();
    INFO("nobody's ping under root's routing id: " << ping);
    CHECK(starts_with(ping, "error=permission_denied "));
  }
  check_applied_once(ep, add);
}

// Not in the list: the reply cache is saved with the state, so the
// routing id's owner must be too, or a restart forgets whose it is.
TEST_CASE("another uid does not get a client's cached replies after a daemon restart",
          "[access][restart]") {
  if (!root_for()) return;
  test::OpenDaemon d;
  const std::string ep = d.endpoint();
  reserve_owned(ep);
  const std::string add = encode(4242, StoreAdd{"owned", "n", 1});
  REQUIRE(ask(ep, add, {.routing_id = kRoutingId}) == "reply=int value=1");
  d.kill9();
  d.start();
  open_to_everyone(d);

  {
    AsNobody nobody(
        [&](Lines& io) { io.say(ask(ep, add, {.routing_id = kRoutingId, .timeout = 3s})); });
    auto stolen = nobody.hear();
    INFO("nobody's copy of root's store_add after the restart: " << stolen);
    CHECK(starts_with(stolen, "error=permission_denied "));
  }
  check_applied_once(ep, add);
}

TEST_CASE("another uid connecting with a live client's routing id does not take it over",
          "[access]") {
  if (!root_for()) return;
  test::OpenDaemon d;
  const std::string ep = d.endpoint();
  reserve_owned(ep);
  // Root's client parks a get of a key not set yet. Its socket does not
  // reconnect within the test: a connection taken from it stays taken.
  RawClient victim(ep, kRoutingId, 10s);
  REQUIRE(victim.ask(encode(1, Ping{})) == "reply=pong");
  victim.send(encode(2, StoreGet{"owned", "late", 8000}));
  REQUIRE(victim.ask(encode(3, Ping{})) == "reply=pong");  // the get is parked

  AsNobody nobody([&](Lines& io) { thief(io, ep, true); });
  auto ping = nobody.hear();
  INFO("nobody's ping under root's live routing id: " << ping);
  // Ignored (ZeroMQ keeps the first connection) or refused; never served.
  CHECK((ping == "ping: no reply" || starts_with(ping, "ping: error=permission_denied ")));

  REQUIRE(ask(ep, encode(4, StoreSet{"owned", "late", "secret-late"})) == "reply=ok");
  auto got = thief_got(nobody);
  CHECK(victim.recv(3s) == "reply=value value=secret-late");
  for (const auto& line : got) {
    INFO("nobody received: " << line);
    CHECK(line.find("secret-late") == std::string::npos);
    CHECK(line.find("permission_denied") != std::string::npos);
  }
  CHECK(ask(ep, encode(5, StoreGet{"owned", "late", 0})) == "reply=value value=secret-late");
}

namespace {

// Not in the list: with handover off, the routing id of a client
// whose connection dropped is free to take; a get the client left parked
// must not be answered to another uid's connection holding the routing id,
// whether that connection sent something (refused) or nothing at all.
void dropped_takeover(bool thief_pings) {
  test::OpenDaemon d;
  const std::string ep = d.endpoint();
  reserve_owned(ep);
  {
    RawClient victim(ep, kRoutingId);
    REQUIRE(victim.ask(encode(1, Ping{})) == "reply=pong");
    victim.send(encode(2, StoreGet{"owned", "late", 8000}));
    REQUIRE(victim.ask(encode(3, Ping{})) == "reply=pong");  // the get is parked
  }
  std::this_thread::sleep_for(200ms);  // the daemon sees the connection end

  {
    AsNobody nobody([&](Lines& io) { thief(io, ep, thief_pings); });
    auto first = nobody.hear();
    INFO("nobody under root's dropped routing id: " << first);
    if (thief_pings)
      CHECK(starts_with(first, "ping: error=permission_denied "));
    else
      REQUIRE(first == "connected");

    REQUIRE(ask(ep, encode(4, StoreSet{"owned", "late", "secret-late"})) == "reply=ok");
    for (const auto& line : thief_got(nobody)) {
      INFO("nobody received: " << line);
      CHECK(line.find("secret-late") == std::string::npos);
    }
  }
  // Nobody's connection ended: without handover, ZeroMQ would ignore a
  // connection presenting its routing id until then (and for good).
  std::this_thread::sleep_for(200ms);
  // Root's client, back with its routing id, sends its get again and gets
  // the value.
  CHECK(ask(ep, encode(2, StoreGet{"owned", "late", 8000}), {.routing_id = kRoutingId}) ==
        "reply=value value=secret-late");
}

}  // namespace

TEST_CASE("another uid taking a dropped client's routing id does not get its parked reply",
          "[access][dropped]") {
  if (!root_for()) return;
  dropped_takeover(true);
}

TEST_CASE("a silent connection of another uid with a dropped client's routing id gets nothing",
          "[access][dropped]") {
  if (!root_for()) return;
  dropped_takeover(false);
}
