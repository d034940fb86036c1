// musterd killed with SIGKILL while jobs run, then started again on the same
// runtime directory (as systemd's Restart=on-failure does): ranks keep their
// ranks and GPUs, nobody else gets those GPUs, stores survive, clients
// reconnect and resend on their own, and a state file that cannot be used
// is moved aside instead of stopping the daemon.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "muster/client.hpp"
#include "muster/launcher.hpp"
#include "protocol/envelope.hpp"
#include "protocol/messages.hpp"
#include "support/as_user.hpp"
#include "support/error_code.hpp"
#include "support/process.hpp"
#include "support/status.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::device;
using test::job;
using test::Process;
using test::Rank;
using test::slurp;
using test::spit;
using test::TempDir;
using test::TestDaemon;

namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// One request on a DEALER with a routing id of our choosing, as libmuster
// sends it (and sends it again); returns the reply frame. Each call is a new
// connection under the same routing id, and the daemon's ROUTER takes no
// handover: while it has not yet seen the previous call's connection close,
// it ignores the new one. So a call that hears nothing connects and sends
// again, as libmuster does; the daemon's reply cache makes that harmless,
// which is the property under test.
std::string raw_call(const std::string& endpoint, const std::string& routing_id,
                     const std::string& frame) {
  zmq::context_t ctx;
  for (int attempt = 0; attempt < 20; ++attempt) {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::routing_id, zmq::buffer(routing_id));
    s.set(zmq::sockopt::rcvtimeo, 500);
    s.connect(endpoint);
    s.send(zmq::buffer(frame));
    zmq::message_t reply;
    if (s.recv(reply)) return reply.to_string();
  }
  throw std::runtime_error("no reply from " + endpoint);
}

int64_t int_reply(const std::string& frame, uint64_t want_id) {
  auto env = proto::decode_envelope(frame.data(), frame.size());
  REQUIRE(env.request_id == want_id);
  REQUIRE(env.type == static_cast<uint16_t>(proto::MsgType::kInt));
  return proto::Int::unpack(env.payload).value;
}

// musterd on dir with its stderr, started on a state file of our making.
struct StartedOn {
  std::unique_ptr<Process> proc;
  std::string endpoint;
  explicit StartedOn(const TempDir& dir, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {test::program("MUSTER_TEST_MUSTERD"),
                                     "--runtime-dir",
                                     dir.path(),
                                     "--no-config",
                                     "--log-level",
                                     "warning"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc = std::make_unique<Process>(argv, std::map<std::string, std::string>{}, true);
    endpoint = "ipc://" + dir.path() + "/musterd.sock";
  }
  bool up() {
    return test::eventually(
        [&] {
          try {
            Client({endpoint, 200ms}).ping();
            return true;
          } catch (const Error&) {
            return false;
          }
        },
        30s);
  }
  ~StartedOn() {
    if (proc->wait(0ms)) return;
    proc->signal(SIGTERM);
    proc->wait(5s);
  }
};

// A state file in the daemon's format, for the ways it can be wrong.
std::string state_file(uint64_t version, bool device_twice) {
  codec::Buffer buf;
  codec::Packer p(buf);
  auto slot = [&](int64_t pid, int64_t device) {
    p.pack_map(5);
    codec::key(p, "state"), codec::put_str(p, "joined");
    codec::key(p, "pid"), p.pack(pid);
    codec::key(p, "joined_pid"), p.pack(pid);
    codec::key(p, "device"), p.pack(device);
    codec::key(p, "started"), p.pack(uint64_t{0});
  };
  auto one_job = [&](const std::string& id) {
    p.pack_map(6);
    codec::key(p, "id"), codec::put_str(p, id);
    codec::key(p, "generation"), p.pack(uint64_t{0});
    codec::key(p, "local_world_size"), p.pack(uint32_t{1});
    codec::key(p, "wants_gpu"), p.pack(true);
    codec::key(p, "slots"), p.pack_array(1);
    slot(getpid(), 0);  // this test process: alive, so the slot would stay
    codec::key(p, "kv"), p.pack_array(0);
  };
  p.pack_map(5);
  codec::key(p, "format"), codec::put_str(p, "musterd-state");
  codec::key(p, "version"), p.pack(version);
  codec::key(p, "jobs"), p.pack_array(device_twice ? 2 : 1);
  one_job("first");
  if (device_twice) one_job("second");
  codec::key(p, "leases"), p.pack_array(1);
  p.pack_map(3);
  codec::key(p, "device"), p.pack(int64_t{0});
  codec::key(p, "job"), codec::put_str(p, "first");
  codec::key(p, "local_rank"), p.pack(uint32_t{0});
  codec::key(p, "replies"), p.pack_array(0);
  return std::string(buf.data(), buf.size());
}

// A thread in which a client of job "wait" (of 2 local ranks) joins as
// local_rank and does op; how that ended (outcome(): "" when it returned)
// goes to `ended`.
std::thread in_job_wait(const TestDaemon& d, int local_rank, std::string& ended,
                        std::function<void(Client&)> op) {
  return std::thread([&d, local_rank, op = std::move(op), &ended] {
    ended = test::outcome([&] {
      Client c({d.endpoint()});
      c.join({"wait", 2, false, local_rank});
      op(c);
    });
  });
}

}  // namespace

TEST_CASE("after kill -9 and a restart, ranks keep their ranks and GPUs and nobody gets those") {
  TestDaemon d({"--simulate-gpus", "4"});
  Rank r0(d, "train", 2, 0), r1(d, "train", 2, 1);
  REQUIRE(r0.line.find("rank=0") == 0);
  REQUIRE(r1.line.find("rank=1") == 0);
  REQUIRE(r0.device >= 0);
  REQUIRE(r1.device >= 0);
  // A launcher-style job: reserved by this process, generation 3, no GPU.
  Client launcher({d.endpoint()});
  muster::reserve(launcher, "launched", 1, false, {}, getpid(), 3);
  auto old_pid = d.pid();

  d.kill9();
  d.start();

  auto s = Client({d.endpoint()}).status();
  CHECK(s.pid != old_pid);
  const JobInfo* train = job(s, "train");
  REQUIRE(train != nullptr);
  REQUIRE(train->ranks.size() == 2);
  CHECK(train->ranks[0].pid == r0.proc->pid());
  CHECK(train->ranks[1].pid == r1.proc->pid());
  CHECK(train->ranks[0].device == r0.device);
  CHECK(train->ranks[1].device == r1.device);
  CHECK(train->ranks[0].state == "joined");
  CHECK(train->ranks[1].state == "joined");
  REQUIRE(device(s, r0.device) != nullptr);
  CHECK(device(s, r0.device)->job == "train");
  CHECK(device(s, r0.device)->pid == r0.proc->pid());
  CHECK(device(s, r1.device)->job == "train");
  const JobInfo* launched = job(s, "launched");
  REQUIRE(launched != nullptr);
  CHECK(launched->generation == 3);
  CHECK(launched->ranks[0].state == "reserved");

  // The other two GPUs go to a new job; a fifth rank finds none.
  Rank n0(d, "next", 3, 0), n1(d, "next", 3, 1);
  REQUIRE(n0.device >= 0);
  REQUIRE(n1.device >= 0);
  std::set<int> all = {r0.device, r1.device, n0.device, n1.device};
  CHECK(all.size() == 4);
  Rank n2(d, "next", 3, 2);
  CHECK_THAT(n2.line, Catch::StartsWith("error=no_device"));
  // Refused: no GPU of a running rank is leased again after the restart.
  CHECK(test::code_of([&] {
          Client launcher({d.endpoint()});
          muster::reserve(launcher, "greedy", 1, true, {r0.device}, getpid());
        }) == ErrorCode::kNoDevice);
}

TEST_CASE("the store survives a restart, and a request sent again is applied once") {
  TestDaemon d;
  Client c({d.endpoint()});
  c.join({"kv", 1, false, -1});
  std::string id(128, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 7);
  c.set("nccl/comm0", id);
  CHECK(c.add("counter", 5) == 5);
  // A request whose reply the client never saw: the same client (routing
  // id) sends the same request id again, once before and once after the
  // restart. It counts once.
  std::string who = "mraw-client-1";
  auto add10 = proto::encode(42, proto::StoreAdd{"kv", "once", 10});
  CHECK(int_reply(raw_call(d.endpoint(), who, add10), 42) == 10);
  CHECK(int_reply(raw_call(d.endpoint(), who, add10), 42) == 10);

  d.kill9();
  d.start();

  // The same Client object, untouched: its socket reconnected by itself.
  CHECK(c.get("nccl/comm0", 5s) == id);
  CHECK(c.add("counter", 1) == 6);
  CHECK(int_reply(raw_call(d.endpoint(), who, add10), 42) == 10);
  CHECK(c.get("once") == "10");
  // A new request id is a new request.
  auto again = proto::encode(43, proto::StoreAdd{"kv", "once", 10});
  CHECK(int_reply(raw_call(d.endpoint(), who, again), 43) == 20);
}

TEST_CASE("a client waiting across the restart gets its answer without an error") {
  TestDaemon d;
  Client setter({d.endpoint()});
  setter.join({"wait", 2, false, 0});
  std::string got;
  std::string get_error, wait_error, barrier_error;
  auto t0 = std::chrono::steady_clock::now();
  // Rank 0's get and wait (the same pid: the same slot) and rank 1's barrier
  // (rank 0 arrives after the restart) park before it.
  std::thread getter =
      in_job_wait(d, 0, get_error, [&](Client& c) { got = c.get("late-key", 20s); });
  std::thread waiter = in_job_wait(d, 0, wait_error, [](Client& c) {
    c.wait({"late-key", "other-key"}, 20s);
  });
  std::thread barrier =
      in_job_wait(d, 1, barrier_error, [](Client& c) { c.barrier("across", 20s); });
  std::this_thread::sleep_for(500ms);  // all three are parked in the daemon

  d.kill9();
  d.start();

  // Checked below, once the threads are joined.
  const std::string main_error = test::outcome([&] {
    setter.set("late-key", "after-restart");
    setter.set("other-key", "x");
    setter.barrier("across", 20s);
  });
  getter.join();
  waiter.join();
  barrier.join();
  CHECK(main_error == "");
  CHECK(get_error == "");
  CHECK(wait_error == "");
  CHECK(barrier_error == "");
  CHECK(got == "after-restart");
  CHECK(std::chrono::steady_clock::now() - t0 < 15s);  // not by a timeout
}

TEST_CASE("a rank that died while musterd was down loses its slot and GPU at the restart") {
  TestDaemon d({"--simulate-gpus", "2"});
  Rank r0(d, "half", 2, 0), r1(d, "half", 2, 1);
  Rank lone(d, "lone", 1, 0, "cpu");
  REQUIRE(r0.device >= 0);
  REQUIRE(r1.device >= 0);
  REQUIRE(lone.line.find("rank=0") == 0);

  d.kill9();
  r1.proc->signal(SIGKILL);
  REQUIRE(r1.proc->wait(5s));
  lone.proc->signal(SIGKILL);
  REQUIRE(lone.proc->wait(5s));
  d.start();

  auto s = Client({d.endpoint()}).status();
  const JobInfo* half = job(s, "half");
  REQUIRE(half != nullptr);
  CHECK(half->ranks[0].state == "joined");
  CHECK(half->ranks[0].device == r0.device);
  CHECK(half->ranks[1].state == "exited");
  CHECK(half->ranks[1].device == -1);
  CHECK(device(s, r0.device)->job == "half");
  CHECK(device(s, r1.device)->job.empty());
  CHECK(job(s, "lone") == nullptr);  // all its ranks gone: the job ended
  // The freed GPU is leased again, to the next rank that asks.
  Rank next(d, "next", 1);
  CHECK(next.device == r1.device);
}

TEST_CASE("a corrupt state file is moved aside and the daemon starts empty") {
  TestDaemon d({"--simulate-gpus", "1"});
  Rank r(d, "doomed", 1);
  REQUIRE(r.device == 0);
  d.kill9();
  std::string path = d.runtime_dir() + "/state.msgpack";
  REQUIRE(exists(path));
  std::string garbage =
      "\x85\xa6"
      "format\xc1 this is no state file";
  spit(path, garbage);
  d.start();
  CHECK(slurp(path + ".bad") == garbage);
  auto s = Client({d.endpoint()}).status();
  CHECK(s.jobs.empty());
  CHECK(device(s, 0)->job.empty());
  Rank fresh(d, "fresh", 1);
  CHECK(fresh.device == 0);
  // What it saves from then on is good again.
  d.kill9();
  d.start();
  CHECK(Client({d.endpoint()}).status().jobs.size() == 1);
}

TEST_CASE("a state file of another version or with a GPU held twice is refused with a warning") {
  for (bool twice : {false, true}) {
    TempDir dir;
    std::string path = dir.path() + "/state.msgpack";
    spit(path, state_file(twice ? 1 : 99, twice));
    StartedOn daemon(dir, {"--simulate-gpus", "1"});
    REQUIRE(daemon.up());
    auto s = Client({daemon.endpoint}).status();
    CHECK(s.jobs.empty());
    CHECK(device(s, 0)->job.empty());
    CHECK(exists(path + ".bad"));
    daemon.proc->signal(SIGTERM);
    REQUIRE(daemon.proc->wait(5s));
    auto log = daemon.proc->read_all(2s);
    CHECK_THAT(log, Catch::Contains(path) && Catch::Contains("moved it to"));
    CHECK_THAT(log, Catch::Contains(twice ? "never leased twice" : "version 99"));
  }
  // The same file, version 1 and one holder, is taken over as it is.
  TempDir dir;
  spit(dir.path() + "/state.msgpack", state_file(1, false));
  StartedOn daemon(dir, {"--simulate-gpus", "1"});
  REQUIRE(daemon.up());
  auto s = Client({daemon.endpoint}).status();
  REQUIRE(s.jobs.size() == 1);
  CHECK(s.jobs[0].ranks[0].pid == getpid());
  CHECK(device(s, 0)->job == "first");
  CHECK_FALSE(exists(dir.path() + "/state.msgpack.bad"));
}

TEST_CASE("--state-dir keeps the state elsewhere, and two daemons cannot share it") {
  TempDir state;
  TestDaemon d({"--simulate-gpus", "1", "--state-dir", state.path()});
  Rank r(d, "elsewhere", 1);
  REQUIRE(r.device == 0);
  CHECK(exists(state.path() + "/state.msgpack"));
  CHECK_FALSE(exists(d.runtime_dir() + "/state.msgpack"));
  TempDir other_runtime;
  Process second({test::program("MUSTER_TEST_MUSTERD"), "--runtime-dir", other_runtime.path(),
                  "--no-config", "--state-dir", state.path()});
  CHECK(second.wait(5s) == 1);
  d.kill9();
  d.start();
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.jobs.size() == 1);
  CHECK(s.jobs[0].ranks[0].pid == r.proc->pid());
  CHECK(device(s, 0)->job == "elsewhere");
}

TEST_CASE("a job rides out a daemon paused for 15 s: a key wait, a set and a barrier finish") {
  // SIGSTOP stands for a stalled disk or VM. The client's request timeout
  // is the default 10 s, shorter than the pause: a set sent while the
  // daemon is stopped is waited for because the daemon still exists.
  TestDaemon d;
  Client rank1({d.endpoint()});
  rank1.join({"paused", 2, false, 1});
  std::string got, error0, error1;
  std::thread rank0([&] {
    try {
      Client c({d.endpoint()});
      c.join({"paused", 2, false, 0});
      got = c.get("k", 60s);  // parked before the pause, answered after it
      c.barrier("end", 60s);
    } catch (const Error& e) {
      error0 = e.what();
    }
  });
  std::this_thread::sleep_for(500ms);  // rank 0 waits for k
  REQUIRE(::kill(d.pid(), SIGSTOP) == 0);
  std::thread resume([&] {
    std::this_thread::sleep_for(15s);
    ::kill(d.pid(), SIGCONT);
  });
  auto t0 = std::chrono::steady_clock::now();
  try {
    rank1.set("k", "v");  // sent while the daemon is stopped
    rank1.barrier("end", 60s);
  } catch (const Error& e) {
    error1 = e.what();
  }
  auto waited = std::chrono::steady_clock::now() - t0;
  resume.join();
  rank0.join();
  CHECK(error0.empty());
  CHECK(error1.empty());
  CHECK(got == "v");
  CHECK(waited >= 14s);  // the pause was really waited out
}

TEST_CASE("a daemon that is gone still fails a request at the request timeout") {
  TestDaemon d;
  Client c({d.endpoint(), 1500ms});
  c.join({"gone", 1, false, 0});
  d.kill9();  // and not restarted
  auto t0 = std::chrono::steady_clock::now();
  // Without a daemon a set fails, unanswered.
  CHECK(test::code_of([&] { c.set("k", "v"); }) == ErrorCode::kUnavailable);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
}

TEST_CASE("a join from a client the reply cache does not track is saved before its reply",
          "[restart]") {
  // A DEALER with ZeroMQ's own routing id (a REQ socket's too): the reply
  // cache keeps nothing of it. Its join was answered before any save, and
  // a daemon killed then came back without the job.
  TestDaemon d;
  CHECK(test::starts_with(
      test::ask(d.endpoint(), proto::encode(1, proto::Join{"untracked", 1, false, ::getpid(), -1})),
      "reply=rank_info"));
  d.kill9();
  d.start();
  auto s = Client({d.endpoint()}).status();
  CHECK(job(s, "untracked") != nullptr);
}
