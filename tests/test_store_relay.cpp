// The launcher's relay for torch's env:// store (client/cli/store_relay):
// a worker's connect to MASTER_PORT succeeds before rank 0 listens, and
// every byte, end and half-end passes through unchanged once it does.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "cli/store_relay.hpp"

using muster::cli::StoreRelay;
using namespace std::chrono_literals;

namespace {

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

// A listener on 127.0.0.1:port (0: any); its port by bound_port().
Fd listen_on(int port) {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  setsockopt(fd.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  auto a = loopback(port);
  REQUIRE(bind(fd.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(listen(fd.fd, 128) == 0);
  return fd;
}

int bound_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// A port nothing listens on (as rank 0's store's, before it starts).
int unused_port() {
  Fd l = listen_on(0);
  return bound_port(l.fd);
}

// connect(2)'s own answer, blocking.
int connect_to(int port, Fd& out) {
  out = Fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  auto a = loopback(port);
  return connect(out.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
}

bool readable(int fd, std::chrono::milliseconds within) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, static_cast<int>(within.count())) == 1;
}

Fd accept_within(int listener, std::chrono::milliseconds within) {
  if (!readable(listener, within)) return Fd();
  return Fd(accept(listener, nullptr, nullptr));
}

void send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    off += static_cast<size_t>(n);
  }
}

// Reads until `n` bytes or the end (or 10 s of silence).
std::string read_n(int fd, size_t n) {
  std::string out;
  char buf[65536];
  while (out.size() < n && readable(fd, 10s)) {
    ssize_t got = read(fd, buf, std::min(sizeof buf, n - out.size()));
    if (got <= 0) break;
    out.append(buf, static_cast<size_t>(got));
  }
  return out;
}

// True when the peer's end arrives (read returns 0) within 5 s.
bool ended(int fd) {
  char c;
  return readable(fd, 5s) && read(fd, &c, 1) == 0;
}

std::string pattern(size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>((i * 131 + seed * 7919 + i / 4093) & 0xff);
  return s;
}

// A relay with rank 0 listening, and one worker joined through it.
struct Joined {
  int inner = unused_port();
  StoreRelay relay{0, inner};
  Fd store = listen_on(inner);
  Fd worker, rank0_side;
  Joined() {
    REQUIRE(connect_to(relay.port(), worker) == 0);
    rank0_side = accept_within(store.fd, 5s);
    REQUIRE(rank0_side.fd >= 0);
  }
};

// Runs `body` in a child whose fd limit is `fds` (so that the test's own
// limit is left alone) and returns its exit code: 0 when all held.
int in_child_with_fds(rlim_t fds, const std::function<int()>& body) {
  pid_t child = fork();
  if (child == 0) {
    rlimit r{fds, fds};
    _exit(setrlimit(RLIMIT_NOFILE, &r) != 0 ? 10 : body());
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("a worker's connect succeeds before rank 0 listens, and its bytes reach rank 0 then") {
  int inner = unused_port();
  StoreRelay relay(0, inner);
  REQUIRE(relay.port() > 0);
  Fd direct;
  CHECK(connect_to(inner, direct) == ECONNREFUSED);  // what a worker met without the relay
  Fd worker;
  REQUIRE(connect_to(relay.port(), worker) == 0);
  send_all(worker.fd, "set key");
  std::this_thread::sleep_for(200ms);  // rank 0 still importing torch
  Fd store = listen_on(inner);
  Fd rank0_side = accept_within(store.fd, 5s);
  REQUIRE(rank0_side.fd >= 0);
  CHECK(read_n(rank0_side.fd, 7) == "set key");
  send_all(rank0_side.fd, "ok");
  CHECK(read_n(worker.fd, 2) == "ok");
}

TEST_CASE("the relay listens for IPv6 workers too") {
  int inner = unused_port();
  StoreRelay relay(0, inner);
  Fd store = listen_on(inner);
  Fd worker(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  a.sin6_port = htons(static_cast<uint16_t>(relay.port()));
  if (connect(worker.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    WARN("no IPv6 loopback here: not checked");
    return;
  }
  Fd rank0_side = accept_within(store.fd, 5s);
  REQUIRE(rank0_side.fd >= 0);
  send_all(worker.fd, "v6");
  CHECK(read_n(rank0_side.fd, 2) == "v6");
}

TEST_CASE("megabytes both ways pass in order, past the relay's buffers, with a slow reader") {
  Joined j;
  auto& worker = j.worker;
  auto& rank0_side = j.rank0_side;
  const size_t n = 8u << 20;  // 8 MiB each way: eight times a direction's buffer
  std::string up = pattern(n, 1), down = pattern(n, 2);
  // Both ends write everything before reading anything: the relay must go
  // on taking from one side while the other's reader is not reading.
  std::thread w1([&] { send_all(worker.fd, up); });
  std::thread w2([&] { send_all(rank0_side.fd, down); });
  std::this_thread::sleep_for(300ms);
  std::string got_up = read_n(rank0_side.fd, n);
  std::string got_down = read_n(worker.fd, n);
  w1.join();
  w2.join();
  CHECK(got_up.size() == n);
  CHECK(got_down.size() == n);
  CHECK(got_up == up);
  CHECK(got_down == down);
}

TEST_CASE("a worker's half-close reaches rank 0, and rank 0's answer still comes back") {
  Joined j;
  auto& worker = j.worker;
  auto& rank0_side = j.rank0_side;
  send_all(worker.fd, "q");
  REQUIRE(shutdown(worker.fd, SHUT_WR) == 0);
  CHECK(read_n(rank0_side.fd, 1) == "q");
  CHECK(ended(rank0_side.fd));
  send_all(rank0_side.fd, "answer");
  rank0_side = Fd();
  CHECK(read_n(worker.fd, 6) == "answer");
  CHECK(ended(worker.fd));
}

TEST_CASE("rank 0's end reaches the worker") {
  Joined j;
  auto& worker = j.worker;
  auto& rank0_side = j.rank0_side;
  rank0_side = Fd();
  CHECK(ended(worker.fd));
}

TEST_CASE("a worker that left before rank 0 listened is not passed on to rank 0") {
  int inner = unused_port();
  StoreRelay relay(0, inner);
  {
    // What a killed attempt's torch client sent at once (its ADD to the
    // store's worker count) must not reach the next attempt's rank 0.
    Fd gone;
    REQUIRE(connect_to(relay.port(), gone) == 0);
    send_all(gone.fd, "add init/ 1");
  }
  std::this_thread::sleep_for(200ms);
  Fd store = listen_on(inner);
  CHECK(accept_within(store.fd, 500ms).fd < 0);
  // The relay is still there for the next.
  Fd worker;
  REQUIRE(connect_to(relay.port(), worker) == 0);
  CHECK(accept_within(store.fd, 5s).fd >= 0);
}

TEST_CASE("a hundred workers waiting for rank 0 each get their own answers") {
  int inner = unused_port();
  StoreRelay relay(0, inner);
  std::vector<Fd> workers(100);
  for (size_t i = 0; i < workers.size(); ++i) {
    REQUIRE(connect_to(relay.port(), workers[i]) == 0);
    send_all(workers[i].fd, "worker " + std::to_string(1000 + i));
  }
  Fd store = listen_on(inner);
  // Rank 0's store: each connection's first 11 bytes, echoed reversed.
  std::thread rank0([&] {
    for (size_t i = 0; i < workers.size(); ++i) {
      Fd c = accept_within(store.fd, 10s);
      if (c.fd < 0) return;
      std::string req = read_n(c.fd, 11);
      send_all(c.fd, std::string(req.rbegin(), req.rend()));
    }
  });
  for (size_t i = 0; i < workers.size(); ++i) {
    std::string sent = "worker " + std::to_string(1000 + i);
    CHECK(read_n(workers[i].fd, 11) == std::string(sent.rbegin(), sent.rend()));
  }
  rank0.join();
}

TEST_CASE("the relay's end closes its connections and frees the port") {
  int inner = unused_port();
  Fd store = listen_on(inner);
  Fd worker;
  int port = 0;
  {
    StoreRelay relay(0, inner);
    port = relay.port();
    REQUIRE(connect_to(port, worker) == 0);
    REQUIRE(accept_within(store.fd, 5s).fd >= 0);
  }
  CHECK(ended(worker.fd));
  StoreRelay again(port, inner);  // the port is free again (no throw)
  CHECK(again.port() == port);
}

TEST_CASE("a port another program listens on is refused with the system's error") {
  Fd other = listen_on(0);
  int taken = bound_port(other.fd);
  try {
    StoreRelay relay(taken, unused_port());
    FAIL("the relay took a port another program listens on");
  } catch (const std::system_error& e) {
    CHECK(e.code().value() == EADDRINUSE);
  }
}

TEST_CASE("a new attempt drops the connections that never reached the last rank 0") {
  int inner = unused_port();
  StoreRelay relay(0, inner);
  Fd old_worker;
  REQUIRE(connect_to(relay.port(), old_worker) == 0);
  send_all(old_worker.fd, "stale");
  std::this_thread::sleep_for(50ms);
  relay.drop_waiting();
  CHECK(ended(old_worker.fd));
  Fd store = listen_on(inner);
  Fd new_worker;
  REQUIRE(connect_to(relay.port(), new_worker) == 0);
  send_all(new_worker.fd, "fresh");
  Fd rank0_side = accept_within(store.fd, 5s);
  REQUIRE(rank0_side.fd >= 0);
  CHECK(read_n(rank0_side.fd, 5) == "fresh");
  CHECK(accept_within(store.fd, 300ms).fd < 0);  // and nothing else
}

TEST_CASE("the relay picks rank 0's port itself, never its own") {
  StoreRelay relay(0);
  CHECK(relay.port() > 0);
  CHECK(relay.inner_port() > 0);
  CHECK(relay.inner_port() != relay.port());
  int p = unused_port();
  CHECK_THROWS_AS(StoreRelay(p, p), std::system_error);
}

// Out of fds, accept fails; the listener stays readable, and a relay that
// polled it on would spin. In a child, with 200 fds: the connections the
// relay cannot take wait in the backlog while the thread sleeps, and the
// relay serves again once fds are free.
TEST_CASE("out of fds, the relay neither spins nor stops") {
  int code = in_child_with_fds(200, [] {
    int inner = unused_port();
    StoreRelay relay(0, inner);
    std::vector<Fd> workers;
    for (;;) {
      Fd w;
      if (connect_to(relay.port(), w) != 0 || w.fd < 0) break;
      workers.push_back(std::move(w));
    }
    std::this_thread::sleep_for(200ms);
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    std::this_thread::sleep_for(1s);
    getrusage(RUSAGE_SELF, &after);
    auto cpu_us = [](const rusage& u) {
      return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000L + u.ru_utime.tv_usec +
             u.ru_stime.tv_usec;
    };
    if (cpu_us(after) - cpu_us(before) > 300000) return 11;  // a spinning thread takes ~1 s
    workers.clear();
    Fd store = listen_on(inner);
    Fd worker;
    if (connect_to(relay.port(), worker) != 0) return 12;
    send_all(worker.fd, "again");
    // The relay takes the backlog first; rank 0 answers every connection.
    for (;;) {
      Fd c = accept_within(store.fd, 3s);
      if (c.fd < 0) return 13;
      if (read_n(c.fd, 5) == "again") return 0;
    }
  });
  CHECK(code == 0);
}

// With 120 fds the relay takes 28 connections at once; 40 workers waiting
// for rank 0 are all served, the rest from the listener's backlog as the
// first ones end.
TEST_CASE("workers beyond the relay's connection cap wait their turn, none refused") {
  int code = in_child_with_fds(120, [] {
    int inner = unused_port();
    StoreRelay relay(0, inner);
    std::vector<Fd> workers(40);
    for (size_t i = 0; i < workers.size(); ++i) {
      if (connect_to(relay.port(), workers[i]) != 0) return 11;
      send_all(workers[i].fd, "w" + std::to_string(100 + i));
    }
    Fd store = listen_on(inner);
    // Rank 0's store: answers each connection's 4 bytes and closes it.
    std::thread rank0([&] {
      for (size_t i = 0; i < workers.size(); ++i) {
        Fd c = accept_within(store.fd, 10s);
        if (c.fd < 0) return;
        std::string req = read_n(c.fd, 4);
        send_all(c.fd, req + "!");
      }
    });
    size_t served = 0;
    for (size_t i = 0; i < workers.size(); ++i) {
      std::string want = "w" + std::to_string(100 + i) + "!";
      if (read_n(workers[i].fd, 5) == want) ++served;
      workers[i] = Fd();  // makes room for the next
    }
    rank0.join();
    return served == workers.size() ? 0 : 12;
  });
  CHECK(code == 0);
}
