// Hostile input against a live private musterd over raw DEALER sockets:
// garbage, truncated, bit-flipped, wrong-version and multi-frame messages
// must each get an error reply with a known code (or, for the few that are
// still valid, a valid reply), create no job, and leave a daemon that then
// runs a normal job. Oversized frames: refused, and the daemon survives.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string_view>
#include <thread>
#include <zmq.hpp>

#include "muster/client.hpp"
#include "protocol/envelope.hpp"
#include "protocol/limits.hpp"
#include "support/process.hpp"
#include "support/two_ranks.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::TestDaemon;

namespace {

constexpr uint64_t kSeed = 20240611;  // fixed: a failure reproduces

// Valid requests that cannot create a job: no join, no reserve (whose
// launcher pid, flipped, could name a live process). Jobs they name do not
// exist, so none of them waits.
std::vector<std::string> templates() {
  using namespace proto;
  std::vector<std::string> t;
  uint64_t id = 1;
  t.push_back(encode(id++, Ping{}));
  t.push_back(encode(id++, Status{}));
  t.push_back(encode(id++, Leave{"ghost", 12345, 0}));
  t.push_back(encode(id++, Attach{"ghost", {1, 2}}));
  t.push_back(encode(id++, StoreSet{"ghost", "key", "value"}));
  t.push_back(encode(id++, StoreGet{"ghost", "key", 5}));
  t.push_back(encode(id++, StoreAdd{"ghost", "n", 3}));
  t.push_back(encode(id++, StoreCompareSet{"ghost", "k", "a", "b"}));
  t.push_back(encode(id++, StoreDelete{"ghost", "k"}));
  t.push_back(encode(id++, StoreWait{"ghost", {"a", "b"}, 5}));
  t.push_back(encode(id++, Barrier{"ghost", 0, "b", 5}));
  t.push_back(encode(id++, Shard{"ghost", 0, 100, 1, 2, true, false}));
  return t;
}

struct Gen {
  std::mt19937_64 rng{kSeed};
  std::vector<std::string> tpl = templates();

  size_t below(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }
  std::string bytes(size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  }
  const std::string& any_template() { return tpl[below(tpl.size())]; }

  std::string one_frame() {
    switch (below(6)) {
      case 0:  // random bytes, mostly short
        return bytes(below(8) == 0 ? below(4096) : below(64));
      case 1: {  // truncated valid frame
        const auto& t = any_template();
        return t.substr(0, below(t.size()));
      }
      case 2: {  // bit flips
        std::string s = any_template();
        for (size_t n = 1 + below(4); n > 0; --n) s[below(s.size())] ^= char(1 << below(8));
        return s;
      }
      case 3: {  // another protocol version, otherwise valid
        codec::Buffer payload;
        codec::Packer(payload).pack_map(0);
        auto v = static_cast<uint16_t>(rng());
        if (v == proto::kVersion) v = 0;
        return proto::encode_raw(rng(), static_cast<uint16_t>(1 + below(20)), payload, v);
      }
      case 4: {  // a valid envelope with a random type and an empty payload
        codec::Buffer payload;
        codec::Packer(payload).pack_map(0);
        return proto::encode_raw(rng(), static_cast<uint16_t>(rng()), payload);
      }
      default:  // valid as is
        return any_template();
    }
  }

  std::vector<std::string> message() {
    if (below(10) != 0) return {one_frame()};
    // Multi-frame: 2-4 parts; sometimes REQ-style [empty, request], which is valid.
    if (below(3) == 0) return {"", one_frame()};
    std::vector<std::string> parts(2 + below(3));
    for (auto& p : parts) p = one_frame();
    return parts;
  }
};

std::unique_ptr<zmq::socket_t> dealer(zmq::context_t& ctx, const std::string& endpoint) {
  auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
  s->set(zmq::sockopt::linger, 0);
  s->connect(endpoint);
  return s;
}

// The reply's parts, or none after the timeout.
std::vector<zmq::message_t> recv_reply(zmq::socket_t& s, std::chrono::milliseconds timeout) {
  std::vector<zmq::message_t> parts;
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) <= 0) return parts;
  do {
    zmq::message_t m;
    (void)s.recv(m);
    parts.push_back(std::move(m));
  } while (parts.back().more());
  return parts;
}

bool known_code(uint16_t code) {
  return code != 0 && std::string_view(error_name(static_cast<ErrorCode>(code))) != "unknown_error";
}

}  // namespace

TEST_CASE("10,000 hostile messages get error replies and leave a working daemon") {
  TestDaemon d({"--simulate-gpus", "2"});
  zmq::context_t ctx;
  auto s = dealer(ctx, d.endpoint());
  Gen gen;
  int replies = 0, errors = 0, unanswered = 0;
  std::map<std::string, int> codes;
  auto deadline = std::chrono::steady_clock::now() + 120s;
  for (int i = 0; i < 10000; ++i) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    auto msg = gen.message();
    for (size_t k = 0; k < msg.size(); ++k)
      s->send(zmq::buffer(msg[k]),
              k + 1 < msg.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    auto parts = recv_reply(*s, 5s);
    if (parts.empty()) {
      // Only a request that waits (on a job some valid frame created) may go
      // unanswered; its late reply must not be taken for the next one's.
      ++unanswered;
      s = dealer(ctx, d.endpoint());
      continue;
    }
    ++replies;
    INFO("message " << i << " of " << msg.size() << " part(s), first of " << msg[0].size()
                    << " bytes");
    // A REQ-style request's reply starts with the empty delimiter.
    REQUIRE(parts.size() <= 2);
    if (parts.size() == 2) CHECK(parts[0].size() == 0);
    const auto& body = parts.back();
    proto::Envelope env;
    REQUIRE_NOTHROW(env = proto::decode_envelope(body.data(), body.size()));
    if (env.type == static_cast<uint16_t>(proto::MsgType::kErrorReply)) {
      auto e = proto::ErrorReply::unpack(env.payload);
      ++errors;
      ++codes[error_name(static_cast<ErrorCode>(e.code))];
      INFO("error " << e.code << ": " << e.message);
      CHECK(known_code(e.code));
      CHECK(static_cast<ErrorCode>(e.code) != ErrorCode::kInternal);
    } else {
      INFO("reply type " << env.type);
      REQUIRE(proto::type_name(env.type) != nullptr);
      CHECK(env.type >= 100);
    }
  }
  std::string summary;
  for (const auto& [name, n] : codes) summary += " " + name + "=" + std::to_string(n);
  WARN("replies " << replies << " (errors " << errors << ":" << summary << "), unanswered "
                  << unanswered);
  CHECK(replies + unanswered == 10000);
  CHECK(errors > 9000);

  REQUIRE(test::process_exists(d.pid()));
  Client admin({d.endpoint()});
  REQUIRE_NOTHROW(admin.ping());
  // Garbage creates no job: any job there is must be held by live processes
  // (a frame that happened to be a valid request naming one).
  auto st = admin.status();
  for (const auto& j : st.jobs)
    for (const auto& r : j.ranks) {
      INFO("job " << j.id << " rank " << r.rank << " pid " << r.pid << " " << r.state);
      if (r.state != "exited") CHECK(test::process_exists(static_cast<pid_t>(r.pid)));
    }
  if (unanswered > 0) CHECK(!st.jobs.empty());
  for (const auto& dev : st.devices) CHECK(dev.job.empty());

  // A normal job on the same daemon: two ranks (threads of this process).
  auto [r0, r1] = test::check_two_ranks_work(d.endpoint(), "after-garbage");
  CHECK(r0.device != r1.device);
}

TEST_CASE("oversized requests are refused and the daemon survives them") {
  TestDaemon d;
  Client c({d.endpoint()});
  c.join({"big", 1, false, 0});

  // The client library refuses a frame over the limit before sending it.
  try {
    c.set("huge", std::string(65u << 20, 'x'));
    FAIL("a 65 MiB value was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kTooLarge);
  }

  zmq::context_t ctx;
  {
    // Just over the frame limit (under the socket's ZMQ_MAXMSGSIZE): the
    // decoder refuses it with too_large.
    auto s = dealer(ctx, d.endpoint());
    std::string frame(limits::kMaxFrameBytes + 100, '\x90');
    s->send(zmq::buffer(frame));
    auto parts = recv_reply(*s, 20s);
    REQUIRE(parts.size() == 1);
    auto env = proto::decode_envelope(parts[0].data(), parts[0].size());
    REQUIRE(env.type == static_cast<uint16_t>(proto::MsgType::kErrorReply));
    CHECK(proto::ErrorReply::unpack(env.payload).code ==
          static_cast<uint16_t>(ErrorCode::kTooLarge));
  }
  {
    // Far over it: ZMQ_MAXMSGSIZE makes the daemon drop the connection
    // (no reply), and it goes on serving everyone else.
    auto s = dealer(ctx, d.endpoint());
    std::string frame(70u << 20, 'x');
    s->send(zmq::buffer(frame));
    auto parts = recv_reply(*s, 2s);
    CHECK(parts.empty());
  }
  REQUIRE(test::process_exists(d.pid()));
  Client other({d.endpoint()});
  REQUIRE_NOTHROW(other.ping());
  c.set("small", "ok");
  CHECK(c.get("small", 5s) == "ok");
  CHECK(other.status().jobs.size() == 1);
}

TEST_CASE("3000 connections that never send a frame do not stall an idle daemon") {
  // Each one ends as a disconnect event the daemon must read; unread, they
  // once filled the event pipe and blocked ZeroMQ's I/O thread (no accepts,
  // no frames, on every socket) until something else woke the loop.
  TestDaemon d;
  const std::string path = d.endpoint().substr(6);
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      // A full backlog: let the daemon accept what is queued.
      REQUIRE(++refused < 2000);  // 10 s
      std::this_thread::sleep_for(5ms);
      --i;
    }
    ::close(fd);
  }
  std::this_thread::sleep_for(500ms);
  Client c({d.endpoint(), 3000ms});
  CHECK(c.status().jobs.empty());
}
