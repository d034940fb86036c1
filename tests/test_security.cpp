// Local security and fencing against a private musterd: a job belongs to the
// uid that created it, a request may only claim pids of its sender's uid,
// root may do both for anyone, and a request from another generation of a
// job is refused. The tests that need two users run as root and fork a child
// that drops to nobody (65534); elsewhere they are skipped with a warning.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <thread>
#include <zmq.hpp>

#include "muster/client.hpp"
#include "muster/launcher.hpp"
#include "protocol/envelope.hpp"
#include "support/as_user.hpp"
#include "support/muster_cli.hpp"
#include "support/process.hpp"
#include "support/skip.hpp"

using namespace muster;
using namespace muster::proto;
using namespace std::chrono_literals;
using namespace muster::test;

namespace {

const JobInfo* find_job(const DaemonStatus& s, const std::string& id) {
  for (const auto& j : s.jobs)
    if (j.id == id) return &j;
  return nullptr;
}

}  // namespace

TEST_CASE("another uid can neither join, read, write nor release a job it does not own") {
  // Each user's job names are their own: another uid naming root's job
  // reaches nothing (unknown_job, as for a job that does not exist), and its
  // join of that name makes a job of its own.
  if (!test::root_for()) return;
  test::OpenDaemon d({"--simulate-gpus", "1"});
  const std::string ep = d.endpoint();
  const int64_t root_pid = ::getpid();
  Client owner({ep});
  auto me = owner.join({"owned", 2, true, 0});
  REQUIRE(me.device == 0);
  owner.set("secret", "42");

  AsNobody nobody([&](Lines& io) {
    int64_t self = ::getpid();
    io.say(ask(ep, encode(2, StoreGet{"owned", "secret", 0})));
    io.say(ask(ep, encode(3, StoreSet{"owned", "secret", "stolen"})));
    io.say(ask(ep, encode(4, StoreAdd{"owned", "n", 1})));
    io.say(ask(ep, encode(5, StoreCompareSet{"owned", "secret", "42", "stolen"})));
    io.say(ask(ep, encode(6, StoreDelete{"owned", "secret"})));
    io.say(ask(ep, encode(7, StoreWait{"owned", {"secret"}, 100})));
    io.say(ask(ep, encode(8, Barrier{"owned", 1, "b", 100})));
    io.say(ask(ep, encode(9, Shard{"owned", 0, 10, 0, 0, true, false})));
    io.say(ask(ep, encode(10, Leave{"owned", root_pid, 0})));  // the owner's lease
    io.say(ask(ep, encode(11, Attach{"owned", {self, self}})));
    // Its join makes a job of its own of that name (each user's names are
    // their own), which its later requests reach; root's stays untouched.
    io.say(ask(ep, encode(1, Join{"owned", 2, false, self, 1})));
    io.say(ask(ep, encode(12, Reserve{"owned", 1, false, {}, self})));
    io.say(ask(ep, encode(14, StoreSet{"owned", "k", "v"})));
    io.say(ask(ep, encode(15, StoreGet{"owned", "k", 0})));
    io.say(ask(ep, encode(16, Leave{"owned", self, 1})));
  });
  const char* names[] = {"store_get",    "store_set",  "store_add", "store_compare_set",
                         "store_delete", "store_wait", "barrier",   "shard",
                         "leave",        "attach"};
  for (const char* name : names) {
    auto line = nobody.hear();
    INFO(name << ": " << line);
    // Refused as if there were no such job: nothing of whose it is.
    CHECK(line == "error=unknown_job no job 'owned' on this daemon");
  }
  CHECK(starts_with(nobody.hear(), "reply=rank_info rank=1"));
  CHECK(nobody.hear() ==
        "error=conflict job 'owned' already runs on this daemon with 2 local rank(s); pick "
        "another --job-id");
  CHECK(nobody.hear() == "reply=ok");
  CHECK(nobody.hear() == "reply=value value=v");
  CHECK(nobody.hear() == "reply=ok");

  // Nothing changed: the store, the lease, the free slot.
  CHECK(owner.get("secret", 1s) == "42");
  CHECK(!owner.try_get("n"));
  auto st = owner.status();
  REQUIRE(st.jobs.size() == 1);
  const auto* job = find_job(st, "owned");
  REQUIRE(job);
  REQUIRE(job->ranks.size() == 2);
  CHECK(job->ranks[0].state == "joined");
  CHECK(job->ranks[0].pid == root_pid);
  CHECK(job->ranks[1].state == "free");
  REQUIRE(st.devices.size() == 1);
  CHECK(st.devices[0].job == "owned");
  CHECK(st.devices[0].pid == root_pid);
  owner.leave();
}

TEST_CASE("root may act on another user's job") {
  if (!test::root_for()) return;
  test::OpenDaemon d;
  const std::string ep = d.endpoint();
  AsNobody nobody([&](Lines& io) {
    io.say(ask(ep, encode(1, Reserve{"theirs", 1, false, {}, ::getpid()})));
    io.say(ask(ep, encode(2, StoreSet{"theirs", "k", "from-nobody"})));
    io.hear();  // stays alive (holding the slot) until root is done
  });
  REQUIRE(nobody.hear() == "reply=reserved");
  REQUIRE(nobody.hear() == "reply=ok");
  // By the job's name, root reaches its own namespace: nothing there.
  CHECK(ask(ep, encode(3, StoreGet{"theirs", "k", 0})) ==
        "error=unknown_job no job 'theirs' on this daemon");
  // By its key (name~owner), which root alone may say, nobody's job.
  CHECK(ask(ep, encode(3, StoreGet{"theirs~65534", "k", 0})) == "reply=value value=from-nobody");
  CHECK(ask(ep, encode(4, StoreSet{"theirs~65534", "k", "from-root"})) == "reply=ok");
  CHECK(ask(ep, encode(5, StoreGet{"theirs~65534", "k", 0})) == "reply=value value=from-root");
  // Root ends nobody's slot (its pid is nobody's): the job is gone.
  CHECK(ask(ep, encode(6, Leave{"theirs~65534", nobody.pid(), 0})) == "reply=ok");
  CHECK(Client({ep}).status().jobs.empty());
  nobody.say("done");
}

TEST_CASE("a pid of another uid cannot be claimed; root may claim any") {
  if (!root()) {
    // Without a second user: pid 1 (init, root's) is someone else's.
    TestDaemon d;
    Client c({d.endpoint()});
    try {
      muster::reserve(c, "grab", 1, false, {}, 1);
      FAIL("uid " << ::geteuid() << " reserved a job for pid 1");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kPermissionDenied);
      CHECK(std::string(e.what()).find("pid 1 is not a running process of uid " +
                                       std::to_string(::geteuid())) != std::string::npos);
    }
    CHECK(c.status().jobs.empty());
    WARN("SKIP (in part): the two-user checks need root; this test runs as uid " << ::geteuid());
    return;
  }
  test::OpenDaemon d({"--simulate-gpus", "2"});
  const std::string ep = d.endpoint();
  const int64_t root_pid = ::getpid();
  Client owner({ep});
  owner.join({"held", 1, true, 0});

  AsNobody nobody([&](Lines& io) {
    int64_t self = ::getpid();
    io.say(ask(ep, encode(1, Join{"grab", 1, true, root_pid, -1})));
    io.say(ask(ep, encode(2, Reserve{"grab", 1, true, {}, root_pid})));
    io.say(ask(ep, encode(3, Reserve{"own", 1, false, {}, self})));
    io.say(ask(ep, encode(4, Attach{"own", {root_pid}})));
    io.say(ask(ep, encode(5, Leave{"own", root_pid, 0})));
    io.say(ask(ep, encode(6, Attach{"own", {self}})));
    io.hear();  // keeps its job alive until root is done
  });
  const std::string refused =
      "pid " + std::to_string(root_pid) + " is not a running process of uid 65534";
  for (const char* name : {"join", "reserve", "attach", "leave"}) {
    auto line = nobody.hear();
    INFO(name << ": " << line);
    CHECK(starts_with(line, "error=permission_denied "));
    CHECK(line.find(refused) != std::string::npos);
    if (std::string(name) == "reserve") CHECK(nobody.hear() == "reply=reserved");
  }
  CHECK(nobody.hear() == "reply=ok");  // attach with its own pid

  // No job for the refused claims; nobody's own job runs under its pid; the
  // second GPU is still free.
  auto st = owner.status();
  CHECK(!find_job(st, "grab"));
  const auto* own = find_job(st, "own");
  REQUIRE(own);
  CHECK(own->ranks[0].state == "running");
  CHECK(own->ranks[0].pid == nobody.pid());
  size_t leased = 0;
  for (const auto& dev : st.devices) leased += dev.job.empty() ? 0 : 1;
  CHECK(leased == 1);

  // Root may register nobody's process in a job of its own.
  CHECK(starts_with(ask(ep, encode(7, Join{"adopted", 1, false, nobody.pid(), -1})),
                    "reply=rank_info rank=0"));
  nobody.say("done");
}

TEST_CASE("a request from an older generation cannot publish into a newer one") {
  TestDaemon d;
  const std::string ep = d.endpoint();
  Client c({ep});
  // A launcher at its second restart: generation 2. This process is the
  // launcher and, joining its reserved slot, the worker.
  REQUIRE(muster::reserve(c, "fenced", 1, false, {}, ::getpid(), 2).generation == 2);
  REQUIRE(c.join({"fenced", 1, false, 0}).generation == 2);
  c.set("k", "current");
  c.set("n", "5");

  for (uint64_t g : {uint64_t{1}, uint64_t{0}, uint64_t{3}}) {
    std::vector<std::pair<const char*, std::string>> stale = {
        {"store_set", encode(1, StoreSet{"fenced", "k", "stale", g})},
        {"store_add", encode(2, StoreAdd{"fenced", "n", 1, g})},
        {"store_compare_set", encode(3, StoreCompareSet{"fenced", "k", "current", "stale", g})},
        {"store_delete", encode(4, StoreDelete{"fenced", "k", g})},
        {"store_get", encode(5, StoreGet{"fenced", "k", 0, g})},
        {"store_wait", encode(6, StoreWait{"fenced", {"absent"}, 5000, g})},
        {"barrier", encode(7, Barrier{"fenced", 0, "b", 5000, g})},
    };
    for (const auto& [name, frame] : stale) {
      auto line = ask(ep, frame);
      INFO(name << " from generation " << g << ": " << line);
      CHECK(starts_with(line, "error=stale_generation "));
      CHECK(line.find("request from generation " + std::to_string(g) +
                      " refused: job 'fenced' is at generation 2") != std::string::npos);
    }
  }
  // The store is as the current generation left it.
  CHECK(c.get("k", 1s) == "current");
  CHECK(c.get("n", 1s) == "5");
  // The current generation, and a request without one (an older client), pass.
  CHECK(ask(ep, encode(8, StoreSet{"fenced", "k", "next", 2})) == "reply=ok");
  CHECK(ask(ep, encode(9, StoreSet{"fenced", "plain", "x"})) == "reply=ok");
  CHECK(c.get("k", 1s) == "next");
  CHECK(c.add("n", 1) == 6);  // the client's own requests carry generation 2
  c.barrier("all", 5s);
  c.leave();
}

TEST_CASE("libmuster sends its joined generation with every store request and barrier") {
  // A stand-in daemon on a raw ROUTER records what the client sends.
  test::TempDir dir;
  const std::string ep = "ipc://" + dir.path() + "/fake.sock";
  zmq::context_t ctx;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind(ep);
  std::vector<std::pair<std::string, std::optional<uint64_t>>> seen;
  std::thread fake([&] {
    for (int i = 0; i < 9; ++i) {
      zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, 10s) <= 0) return;
      zmq::message_t who, body;
      (void)router.recv(who);
      (void)router.recv(body);
      auto env = decode_envelope(body.data(), body.size());
      std::string reply;
      std::optional<uint64_t> g;
      switch (static_cast<MsgType>(env.type)) {
        case MsgType::kJoin:
          reply = encode(env.request_id, proto::RankInfo{"fake", 0, 0, 1, 1, 0, 1, -1, 7});
          break;
        case MsgType::kStoreSet:
          g = StoreSet::unpack(env.payload).generation;
          reply = encode(env.request_id, Ok{});
          break;
        case MsgType::kStoreGet:
          g = StoreGet::unpack(env.payload).generation;
          reply = encode(env.request_id, Value{"v"});
          break;
        case MsgType::kStoreAdd:
          g = StoreAdd::unpack(env.payload).generation;
          reply = encode(env.request_id, Int{1});
          break;
        case MsgType::kStoreCompareSet:
          g = StoreCompareSet::unpack(env.payload).generation;
          reply = encode(env.request_id, Value{"v"});
          break;
        case MsgType::kStoreDelete:
          g = StoreDelete::unpack(env.payload).generation;
          reply = encode(env.request_id, Bool{true});
          break;
        case MsgType::kStoreWait:
          g = StoreWait::unpack(env.payload).generation;
          reply = encode(env.request_id, Ok{});
          break;
        case MsgType::kBarrier:
          g = Barrier::unpack(env.payload).generation;
          reply = encode(env.request_id, Ok{});
          break;
        default:
          reply = encode_error(env.request_id, ErrorCode::kUnknownType, "not expected here");
      }
      seen.emplace_back(type_name(env.type), g);
      router.send(who, zmq::send_flags::sndmore);
      router.send(zmq::buffer(reply));
    }
  });
  {
    Client c({ep, 5000ms});
    CHECK(c.join({"fake", 1, false, 0}).generation == 7);
    c.set("k", "v");
    c.get("k", 1s);
    c.try_get("k");
    c.add("n", 1);
    c.compare_set("k", "v", "w");
    c.remove("k");
    c.wait({"k"}, 1s);
    c.barrier("b", 1s);
  }
  fake.join();
  REQUIRE(seen.size() == 9);
  CHECK(seen[0].first == "join");
  for (size_t i = 1; i < seen.size(); ++i) {
    INFO(seen[i].first);
    REQUIRE(seen[i].second.has_value());
    CHECK(*seen[i].second == 7);
  }
}

TEST_CASE(
    "muster status --owner shows one user's jobs, and --job with --owner that user's job only") {
  if (!test::root_for()) return;
  test::OpenDaemon d;
  const std::string ep = d.endpoint();
  Client owner({ep});
  owner.join({"roots-job", 1, false, 0});
  AsNobody nobody([&](Lines& io) {
    io.say(ask(ep, encode(1, Reserve{"nobodys-job", 1, false, {}, ::getpid()})));
    io.hear();
  });
  REQUIRE(nobody.hear() == "reply=reserved");
  auto status = [&](std::vector<std::string> args) {
    test::Process p(test::muster_cmd("status", std::move(args)), {{"MUSTER_ENDPOINT", ep}}, true);
    std::string out = p.read_all(20s);
    return std::make_pair(p.wait(10s).value_or(-1), out);
  };
  auto [rc, out] = status({"--json", "--owner", "nobody"});
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("\"id\":\"nobodys-job\"") != std::string::npos);
  CHECK(out.find("\"owner\":65534") != std::string::npos);
  CHECK(out.find("roots-job") == std::string::npos);
  auto [rc2, out2] = status({"--owner", "0"});
  INFO(out2);
  CHECK(rc2 == 0);
  CHECK(out2.find("Job roots-job") != std::string::npos);
  CHECK(out2.find("nobodys-job") == std::string::npos);
  auto [rc3, out3] = status({"--job", "nobodys-job", "--owner", "0"});
  INFO(out3);
  CHECK(rc3 == 2);
  CHECK(out3.find("no job 'nobodys-job' of uid 0 on this daemon") != std::string::npos);
  auto [rc4, out4] = status({"--owner", "no-such-user-xyz"});
  CHECK(rc4 == 2);
  CHECK(out4.find("--owner: no user 'no-such-user-xyz'") != std::string::npos);
  nobody.say("done");
  owner.leave();
}
