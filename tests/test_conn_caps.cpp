// Connections per uid and per peer address (issue #16): refused at the
// handshake (ZAP) beyond their cap, so one user or host cannot take the
// fds everyone needs; plain TCP connections that speak no peer protocol
// are closed. Each connection here is a raw DEALER whose socket monitor
// tells how its handshake ended.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <memory>
#include <thread>
#include <zmq.hpp>

#include "muster/client.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"
#include "protocol/messages.hpp"
#include "support/as_user.hpp"
#include "support/error_code.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::TestDaemon;

namespace {

// A DEALER and the events of its connection.
class Probe {
 public:
  Probe(zmq::context_t& ctx, const std::string& endpoint) : s_(ctx, zmq::socket_type::dealer) {
    static int n = 0;
    const std::string mon = "inproc://conn-caps-probe-" + std::to_string(++n);
    s_.set(zmq::sockopt::linger, 0);
    REQUIRE(zmq_socket_monitor(s_.handle(), mon.c_str(),
                               ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                   ZMQ_EVENT_DISCONNECTED) == 0);
    mon_.emplace(ctx, zmq::socket_type::pair);
    mon_->set(zmq::sockopt::linger, 0);
    mon_->connect(mon);
    s_.connect(endpoint);
  }
  ~Probe() { zmq_socket_monitor(s_.handle(), nullptr, 0); }

  // The next event (and its value) within timeout; 0 when none came.
  uint16_t next(std::chrono::milliseconds timeout, uint32_t* value = nullptr) {
    mon_->set(zmq::sockopt::rcvtimeo, static_cast<int>(timeout.count()));
    zmq::message_t ev, addr;
    if (!mon_->recv(ev) || ev.size() < 6) return 0;
    (void)mon_->recv(addr);
    uint16_t event;
    std::memcpy(&event, ev.data(), sizeof event);
    if (value) std::memcpy(value, static_cast<const char*>(ev.data()) + 2, sizeof *value);
    return event;
  }
  zmq::socket_t& socket() { return s_; }

 private:
  zmq::socket_t s_;
  std::optional<zmq::socket_t> mon_;
};

const std::vector<std::string> kPlainPeers = {"--peer-plain", "--peer-bind", "127.0.0.1",
                                              "--peer-port", "0"};

// Each probe's connection must complete its handshake (within 10 s).
void require_handshakes(std::initializer_list<Probe*> probes) {
  for (Probe* p : probes) REQUIRE(p->next(10s) == ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
}

}  // namespace

TEST_CASE("a uid over its connection cap is refused at the handshake, and others are not") {
  TestDaemon d({"--max-connections-per-uid", "3"});
  zmq::context_t ctx;
  std::vector<std::unique_ptr<Probe>> held;
  // The daemon counts a connection until libzmq reports it closed, which
  // may come a little after the client closed it: the test daemon's own
  // readiness ping can still count while the first probes connect. A probe
  // refused then is tried again; the fourth below must be refused.
  for (int i = 0; i < 3; ++i) {
    uint16_t ev = 0;
    for (int tries = 0; tries < 50 && ev != ZMQ_EVENT_HANDSHAKE_SUCCEEDED; ++tries) {
      if (tries) std::this_thread::sleep_for(100ms);
      auto p = std::make_unique<Probe>(ctx, d.endpoint());
      ev = p->next(10s);
      if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
        held.push_back(std::move(p));
      else
        REQUIRE(ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    }
    REQUIRE(ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
  }
  Probe over(ctx, d.endpoint());
  uint32_t status = 0;
  REQUIRE(over.next(10s, &status) == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
  CHECK(status == 400);

  // What a user of libmuster sees: quota_exceeded naming the setting, at
  // once rather than after the request timeout.
  try {
    Client({d.endpoint(), 30000ms, 30000ms}).ping();
    FAIL("a fourth connection of this uid was served");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kQuotaExceeded);
    CHECK_THAT(e.what(), Catch::Contains("max-connections-per-uid"));
  }

  // Another user still gets in: the cap is this uid's, not the daemon's.
  if (test::root()) {
    test::open_to_everyone(d);
    const std::string ep = d.endpoint();
    test::AsNobody nobody([&](test::Lines& io) {
      io.say(test::ask(ep, proto::encode(1, proto::Ping{}), {"", 5000ms}));
    });
    CHECK(nobody.hear() == "reply=pong");
  } else {
    WARN("SKIP (part): a second uid needs root; this test runs as uid " << ::geteuid());
  }

  // A connection that ends makes room.
  held.pop_back();
  REQUIRE(test::eventually(
      [&] {
        try {
          // wait_timeout too: a daemon that is alive is otherwise waited
          // for up to 300 s, and a refusal the client missed (one run hung
          // here past the test's timeout) would be waited out that long.
          Client({d.endpoint(), 2000ms, 2000ms}).ping();
          return true;
        } catch (const Error&) {
          return false;
        }
      },
      20s));
  REQUIRE(test::process_exists(d.pid()));
}

TEST_CASE("a client refused before its first request is told so, not blocked in send") {
  // libzmq ends a connection refused at the handshake without a reconnect,
  // which leaves the client's DEALER with no peer: a blocking send would
  // then wait forever (one CI run hung here under ASan, whose slower client
  // sent after the refusal had landed).
  TestDaemon d({"--max-connections-per-uid", "1"});
  zmq::context_t ctx;
  std::unique_ptr<Probe> held;
  for (int tries = 0; tries < 50 && !held; ++tries) {
    if (tries) std::this_thread::sleep_for(100ms);
    auto p = std::make_unique<Probe>(ctx, d.endpoint());
    if (p->next(10s) == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) held = std::move(p);
  }
  REQUIRE(held);
  for (int i = 0; i < 3; ++i) {
    Client late({d.endpoint(), 3000ms, 3000ms});
    std::this_thread::sleep_for(300ms);  // the refusal lands before the send
    // A second connection of this uid is not served.
    CHECK_THAT(test::outcome([&] { late.ping(); }),
               Catch::StartsWith("quota_exceeded: ") && Catch::Contains("max-connections-per-uid"));
  }
  REQUIRE(test::process_exists(d.pid()));
}

TEST_CASE("a peer address over its connection cap is refused at the handshake") {
  auto args = kPlainPeers;
  args.insert(args.end(), {"--max-connections-per-peer", "2"});
  TestDaemon d(args);
  const std::string ep = d.peer_endpoint();
  zmq::context_t ctx;
  Probe a(ctx, ep), b(ctx, ep);
  require_handshakes({&a, &b});
  Probe c(ctx, ep);
  uint32_t status = 0;
  REQUIRE(c.next(10s, &status) == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
  CHECK(status == 400);
  // The local socket is another matter.
  CHECK_NOTHROW(Client({d.endpoint()}).ping());
}

TEST_CASE("a plain TCP connection that sends no peer request is closed; a peer's stays") {
  TestDaemon d(kPlainPeers);
  const std::string ep = d.peer_endpoint();
  zmq::context_t ctx;
  Probe silent(ctx, ep), peer(ctx, ep);
  require_handshakes({&silent, &peer});
  // A node joining a job this daemon would coordinate.
  proto::NodeJoin join;
  join.job = "caps-join";
  join.node_id = "test-node";
  join.min_nodes = join.max_nodes = 2;
  join.timeout_ms = 30000;
  auto frame = proto::encode(7, join);
  peer.socket().send(zmq::buffer(frame));
  // Closed by the daemon after its handshake interval (5 s).
  REQUIRE(silent.next(20s) == ZMQ_EVENT_DISCONNECTED);
  // Swept together, had it been silent too: it is not closed.
  CHECK(peer.next(3s) == 0);
  REQUIRE(test::process_exists(d.pid()));
}
