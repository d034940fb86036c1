// A tight connect loop by one user (issue 43): uid 65534 connects to a
// private musterd's shared socket as fast as it can, keeping its first
// thousand connections open and silent and closing the rest at once, while
// root and uid 65533 ask on fresh connections. The caps are enforced inside
// accept (daemon/server/accept_guard.hpp): past its cap and a small slack,
// the flood's connections are closed inside accept, before libzmq sees
// them, and the daemon holds no fd for them. The flood still keeps the
// shared socket's kernel backlog full, and a new connection through it
// waits for a place (35 to 150 ms at p99 on 2 cores; 0.8 to 1.3 s with
// libzmq's 100 ms retry at nice 0). Users who connected before connect
// through their own socket (server/user_sockets.hpp), whose backlog the
// flood cannot reach.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "endpoint.hpp"
#include "host_address.hpp"
#include "latency_checks.hpp"
#include "muster/client.hpp"
#include "muster/error.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"
#include "protocol/messages.hpp"
#include "stuck_support.hpp"
#include "support/as_user.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace muster::proto;
using namespace muster::test;
using namespace std::chrono_literals;

namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 1e9;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100 * v.size()))];
}

// Pings on a new connection each, for `how_long`, that connects again after
// 10 ms when the backlog is full, as libmuster's do (client/lib/
// connection.cpp; libzmq's default is 100 ms): "p99 MS n N unanswered U".
std::string pings(const std::string& ep, std::chrono::milliseconds how_long) {
  std::vector<double> ms;
  int unanswered = 0;
  auto until = std::chrono::steady_clock::now() + how_long;
  for (uint64_t id = 1; std::chrono::steady_clock::now() < until; ++id) {
    auto t0 = std::chrono::steady_clock::now();
    RawClient c(ep, "", 10ms);
    unanswered += c.ask(encode(id, Ping{}), 2s).rfind("reply=pong", 0) != 0;
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return "p99 " + std::to_string(percentile(ms, 99)) + " n " + std::to_string(ms.size()) +
         " unanswered " + std::to_string(unanswered);
}

double p99_of(const std::string& line) {
  return line.rfind("p99 ", 0) == 0 ? std::stod(line.substr(4)) : 1e9;
}

}  // namespace

// The user's first connection, through the shared socket, then until the
// daemon made the user's own: "own" once it did, else "shared".
std::string first_contact(const std::string& ep) {
  if (ask(ep, encode(1, Ping{})) != "reply=pong") return "unanswered";
  for (int i = 0; i < 200 && personal_endpoint(ep) == ep; ++i) std::this_thread::sleep_for(10ms);
  return personal_endpoint(ep) == ep ? "shared" : "own";
}

TEST_CASE("a tight connect loop by one user: others' requests keep p99 <= 100 ms",
          "[hostile][ceilings]") {
  if (!root()) {
    WARN("SKIP: needs root to run other users");
    return;
  }
  // At the priority its systemd unit gives it (Nice=-5,
  // systemd/musterd.service.in): at nice 0 the flood's core starves it.
  test::OpenDaemon d({"--max-connections-per-uid", "50"}, {}, {"nice", "-n", "-5"});
  const std::string ep = d.endpoint(), path = d.runtime_dir() + "/musterd.sock";
  AsNobody other(
      [&](Lines& io) {
        io.say(first_contact(ep));
        if (io.hear() != "go") return;
        io.say(pings(personal_endpoint(ep), 4s));
      },
      kSecondUser);
  REQUIRE(other.hear() == "own");
  REQUIRE(first_contact(ep) == "own");
  AsNobody flood([path](Lines& io) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    std::vector<int> held;
    uint64_t connects = 0, refused = 0;
    io.say("go");
    auto until = std::chrono::steady_clock::now() + 8s;
    while (std::chrono::steady_clock::now() < until) {
      int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      ++connects;
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ++refused;  // a full backlog: at once again
        ::close(fd);
        continue;
      }
      // The first thousand are kept, silent; then each is closed at once,
      // and the loop connects again: a churn as fast as one core goes.
      if (held.size() < 1000)
        held.push_back(fd);
      else
        ::close(fd);
    }
    io.say("connects " + std::to_string(connects) + " backlog-full " + std::to_string(refused) +
           " held " + std::to_string(held.size()));
    io.hear();
  });
  REQUIRE(flood.hear() == "go");
  std::this_thread::sleep_for(500ms);  // the flood at full speed
  other.say("go");
  // Beside the new connections: requests on a connection kept open (a
  // rank's), which the flood's backlog does not stand in front of.
  LatencyProbe kept(ep, false);  // after the forks (latency.hpp)
  const std::string mine = pings(personal_endpoint(ep), 4s), theirs = other.hear(20s);
  const auto on_kept = kept.stop();
  // A first contact, through the shared socket the flood fills.
  const std::string shared = pings(ep, 2s);
  const std::string done = flood.hear(20s);
  INFO("root " << mine << "; uid 65533 " << theirs << "; nobody " << done << "; kept "
               << on_kept.line() << "; shared " << shared);
  WARN("during nobody's connect loop (" << done << "): new connections on their own sockets: root "
                                        << mine << ", uid 65533 " << theirs
                                        << "; on the shared socket: root " << shared
                                        << "; a kept connection: " << on_kept.line());
  CHECK(mine.find("unanswered 0") != std::string::npos);
  CHECK(theirs.find("unanswered 0") != std::string::npos);
  CHECK(shared.find("unanswered 0") != std::string::npos);
  CHECK(on_kept.unanswered == 0);
  CHECK(p99_within_bound(on_kept.p99_ms));
  CHECK(p99_within_bound(p99_of(mine)));
  CHECK(p99_within_bound(p99_of(theirs)));
  // A first contact waits for the flood's backlog (its connect is retried
  // every 10 ms): p99 35 to 150 ms on this 2-core machine. Bounded at 500
  // ms here, so that the seconds of before fail.
  if (kLatencyChecked) CHECK(p99_of(shared) <= 500);
  REQUIRE(process_exists(d.pid()));
  CHECK(ask(ep, encode(1, Ping{})) == "reply=pong");
}

TEST_CASE("a rendezvous naming a host is refused: the daemon looks up no names",
          "[hostile][ceilings]") {
  // A lookup in the daemon held everyone: 20 rendezvous naming hosts that
  // do not resolve (a slow resolver, or none) held root's pings 2 s, two
  // unanswered. Now the launcher looks names up (as the user) and the
  // daemon takes addresses only.
  CHECK(numeric_host_port("127.0.0.1:29400"));
  CHECK(numeric_host_port("[::1]:29400"));
  CHECK_FALSE(numeric_host_port("localhost:29400"));
  CHECK_FALSE(numeric_host_port("127.0.0.1:0"));
  CHECK_FALSE(numeric_host_port("::1:29400"));
  CHECK(resolve_host_port("localhost:29400") == "127.0.0.1:29400");
  CHECK(resolve_host_port("[::1]:5") == "[::1]:5");
  CHECK_THROWS_AS(resolve_host_port("no-such-host.invalid:29400"), Error);
  TestDaemon d({"--peer-plain"});
  const std::string ep = d.endpoint();
  LatencyProbe probe(ep);
  RawClient c(ep);
  uint64_t id = 1;
  for (int i = 0; i < 20; ++i) {
    const std::string job = "dns" + std::to_string(i);
    REQUIRE(c.ask(encode(id++, Reserve{job, 1, false, {}, ::getpid()})) == "reply=reserved");
    Rendezvous m{job,    "no-such-host-" + std::to_string(i) + ".invalid:29400",
                 -1,     2,
                 2,      0,
                 600000, "127.0.0.1",
                 29500};
    const std::string r = c.ask(encode(id++, m));
    INFO(r);
    CHECK(starts_with(r, "error=invalid_argument"));
    CHECK(r.find("looks up no host names") != std::string::npos);
  }
  CHECK_OTHERS_SERVED(probe, "20 rendezvous naming hosts");
}

#ifdef MUSTER_TEST_METRICS  // a build with libmicrohttpd: the metrics endpoint exists
TEST_CASE("bad requests to the metrics endpoint write at most a line per 10 s",
          "[hostile][ceilings]") {
  // libmicrohttpd's own error lines came past musterd's rate limit: 200
  // requests with 1 MB headers wrote 30 of them, each quoting the request.
  LoggedDaemon d({"--metrics-listen", "127.0.0.1:0"});
  std::string metrics;
  std::ifstream(d.dir.path() + "/metrics-endpoint") >> metrics;
  REQUIRE(!metrics.empty());
  const auto colon = metrics.rfind(':');
  const uint16_t port = static_cast<uint16_t>(std::stoi(metrics.substr(colon + 1)));
  const std::string big =
      "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(100 * 1024, 'a') + "\r\n\r\n";
  for (int i = 0; i < 60; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0) {
      (void)::send(fd, big.data(), big.size(), MSG_NOSIGNAL);
      char b[512];
      while (::recv(fd, b, sizeof b, 0) > 0) {
      }
    }
    ::close(fd);
  }
  const size_t lines = d.count("metrics endpoint", 2s);
  INFO("lines about the metrics endpoint: " << lines);
  CHECK(lines <= 2);
  CHECK(ask(d.endpoint, encode(1, Ping{})) == "reply=pong");
}
#endif
