// musterd and the service manager, seen through a fake NOTIFY_SOCKET: READY=1
// once the socket serves, STATUS= with job and lease counts as they change,
// WATCHDOG=1 at half of WATCHDOG_USEC, and nothing of it without libsystemd.
#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <regex>

#include "muster/client.hpp"
#include "muster_config.h"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::Process;
using test::TempDir;

namespace {

// An AF_UNIX datagram socket standing in for systemd's notify socket.
class FakeNotifySocket {
 public:
  explicit FakeNotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    REQUIRE(path.size() < sizeof a.sun_path);
    std::copy(path.begin(), path.end(), a.sun_path);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~FakeNotifySocket() {
    close(fd_);
    unlink(path_.c_str());
  }
  // Each datagram may hold several newline-separated assignments.
  std::vector<std::string> receive(std::chrono::milliseconds timeout) {
    std::vector<std::string> lines;
    auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      end - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) break;
      char buf[4096];
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      std::string msg(buf, static_cast<size_t>(n));
      for (size_t pos = 0; pos < msg.size();) {
        auto nl = msg.find('\n', pos);
        if (nl == std::string::npos) nl = msg.size();
        if (nl > pos) lines.push_back(msg.substr(pos, nl - pos));
        pos = nl + 1;
      }
    }
    return lines;
  }
  // Waits for a line matching re, collecting everything seen on the way;
  // lines after the match stay for the next call.
  bool wait_for(const std::string& re, std::chrono::milliseconds timeout,
                std::vector<std::string>* seen = nullptr) {
    auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      while (!pending_.empty()) {
        auto l = pending_.front();
        pending_.erase(pending_.begin());
        if (seen) seen->push_back(l);
        if (std::regex_match(l, std::regex(re))) return true;
      }
      if (std::chrono::steady_clock::now() >= end) return false;
      pending_ = receive(50ms);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<std::string> pending_;
};

[[maybe_unused]] size_t count(const std::vector<std::string>& lines, const std::string& what) {
  return static_cast<size_t>(std::count(lines.begin(), lines.end(), what));
}

// Starts musterd through sh so that WATCHDOG_PID can be musterd's own pid
// (exec keeps it), as systemd sets it.
std::unique_ptr<Process> start(const TempDir& dir, const std::string& notify,
                               const std::string& watchdog_usec, bool own_pid = true) {
  std::string sh =
      own_pid ? "WATCHDOG_PID=$$ exec \"$0\" \"$@\"" : "WATCHDOG_PID=1 exec \"$0\" \"$@\"";
  std::map<std::string, std::string> env{{"NOTIFY_SOCKET", notify}};
  env["WATCHDOG_USEC"] = watchdog_usec;  // empty removes it
  return std::make_unique<Process>(
      std::vector<std::string>{"/bin/sh", "-c", sh, test::program("MUSTER_TEST_MUSTERD"),
                               "--no-config", "--runtime-dir", dir.path() + "/rt",
                               "--simulate-gpus", "2", "--log-level", "warning"},
      env);
}

void stop(Process& p) {
  p.signal(SIGTERM);
  if (!p.wait(5s)) p.signal(SIGKILL);
}

}  // namespace

#if HAVE_SYSTEMD

TEST_CASE("musterd sends READY=1 once it serves, then STATUS= as jobs come and go") {
  TempDir dir;
  FakeNotifySocket ns(dir.path() + "/notify");
  auto d = start(dir, dir.path() + "/notify", "");
  std::vector<std::string> seen;
  REQUIRE(ns.wait_for("READY=1", 10s, &seen));
  // READY=1 comes after the bind: the socket answers now.
  Client c({"ipc://" + dir.path() + "/rt/musterd.sock", 2000ms});
  CHECK_FALSE(c.ping().empty());
  CHECK(ns.wait_for("STATUS=0 job\\(s\\), 0 of 2 GPU\\(s\\) leased, 0 rank\\(s\\)", 5s, &seen));

  Process rank({test::program("MUSTER_TEST_RANK"), "notify-job", "2", "0", "gpu"},
               {{"MUSTER_ENDPOINT", c.endpoint()}});
  REQUIRE(rank.read_line(10s).value_or("").find("rank=0") != std::string::npos);
  CHECK(ns.wait_for("STATUS=1 job\\(s\\), 1 of 2 GPU\\(s\\) leased, 1 rank\\(s\\)", 5s, &seen));
  rank.signal(SIGKILL);
  rank.wait(5s);
  CHECK(ns.wait_for("STATUS=0 job\\(s\\), 0 of 2 GPU\\(s\\) leased, 0 rank\\(s\\)", 5s, &seen));
  // Nothing about a watchdog when the unit sets none.
  CHECK(count(seen, "WATCHDOG=1") == 0);
  stop(*d);
  CHECK(ns.wait_for("STOPPING=1", 5s, &seen));
  INFO("seen: " << seen.size());
}

TEST_CASE("musterd pings WATCHDOG=1 at half of WATCHDOG_USEC, even when idle") {
  TempDir dir;
  FakeNotifySocket ns(dir.path() + "/notify");
  auto d = start(dir, dir.path() + "/notify", "200000");
  REQUIRE(ns.wait_for("READY=1", 10s));
  ns.receive(100ms);
  auto t0 = std::chrono::steady_clock::now();
  auto lines = ns.receive(1000ms);
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Every 100 ms: about 10 in a second; a loop that never wakes sends none.
  auto pings = count(lines, "WATCHDOG=1");
  INFO(pings << " pings in " << secs << " s");
  CHECK(pings >= 6);
  CHECK(pings <= 14);
  stop(*d);
}

TEST_CASE("no WATCHDOG=1 when WATCHDOG_PID names another process") {
  TempDir dir;
  FakeNotifySocket ns(dir.path() + "/notify");
  auto d = start(dir, dir.path() + "/notify", "200000", false);
  std::vector<std::string> seen;
  REQUIRE(ns.wait_for("READY=1", 10s, &seen));
  for (auto& l : ns.receive(600ms)) seen.push_back(l);
  CHECK(count(seen, "WATCHDOG=1") == 0);
  stop(*d);
}

#else

TEST_CASE("without libsystemd musterd serves and sends nothing to NOTIFY_SOCKET") {
  TempDir dir;
  FakeNotifySocket ns(dir.path() + "/notify");
  auto d = start(dir, dir.path() + "/notify", "200000");
  std::string sock = dir.path() + "/rt/musterd.sock";
  REQUIRE(test::eventually(
      [&] {
        if (access(sock.c_str(), F_OK) != 0) return false;
        try {
          Client({"ipc://" + sock, 200ms}).ping();
          return true;
        } catch (const Error&) {
          return false;
        }
      },
      10s));
  CHECK(ns.receive(600ms).empty());
  stop(*d);
}

#endif
