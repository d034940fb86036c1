// The embedded daemon's end: the launcher that started it releases it when
// it will start no more workers (no lingering after the last job), but a
// daemon that serves another launcher's job stays until that job ends.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "muster/client.hpp"
#include "support/muster_cli.hpp"
#include "support/process.hpp"

using namespace std::chrono_literals;
using muster::test::Process;
namespace test = muster::test;

namespace {

// The socket inodes listening on TCP `port` (IPv4 or IPv6), from /proc/net.
std::set<std::string> listeners(int port) {
  char hex[8];
  std::snprintf(hex, sizeof hex, ":%04X", port);
  std::set<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (st == "0A" && local.size() > 5 && local.substr(local.size() - 5) == hex)
        inodes.insert(inode);
    }
  }
  return inodes;
}

// Whether process `pid` holds one of these socket inodes.
bool holds_socket(pid_t pid, const std::set<std::string>& inodes) {
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = opendir(dir.c_str());
  if (!d) return false;
  bool found = false;
  while (dirent* e = readdir(d)) {
    char target[128] = {};
    std::string link = dir + "/" + e->d_name;
    if (readlink(link.c_str(), target, sizeof target - 1) <= 0) continue;
    std::string t = target;
    if (t.rfind("socket:[", 0) == 0 && inodes.count(t.substr(8, t.size() - 9))) found = true;
  }
  closedir(d);
  return found;
}

int64_t daemon_pid(const std::string& sock) {
  return muster::Client({"ipc://" + sock}).status().pid;
}

}  // namespace

TEST_CASE("a launcher's release leaves the embedded daemon to another launcher's job") {
  test::TempDir dir;
  auto env = test::embedded_env(dir.path());
  std::string sock = dir.path() + "/musterd.sock";
  // A starts the daemon and ends first; B's job uses A's daemon meanwhile.
  Process a(test::muster_cmd("run", {"-n", "1", "--cpu", "/bin/sh", "-c", "echo up; sleep 1"}),
            env);
  REQUIRE(a.read_line(20s).value_or("") == "[rank0]: up");
  Process b(test::muster_cmd("run", {"-n", "1", "--cpu", "--job-id", "jobb", "/bin/sh", "-c",
                                     "echo up; sleep 4; echo done"}),
            env);
  REQUIRE(b.read_line(20s).value_or("") == "[rank0]: up");
  CHECK(a.wait(10s) == 0);
  // A released its daemon on the way out; B's job keeps it serving.
  Process status({test::program("MUSTER_TEST_MUSTER"), "status"},
                 {{"MUSTER_ENDPOINT", "ipc://" + sock}}, true);
  auto text = status.read_all(10s);
  CHECK(status.wait(10s) == 0);
  CHECK_THAT(text, Catch::Contains("jobb"));
  CHECK(b.read_line(20s).value_or("") == "[rank0]: done");
  CHECK(b.wait(10s) == 0);
  // With no job left (and B not its starter) the daemon goes after its
  // linger.
  CHECK(test::eventually([&] { return access(sock.c_str(), F_OK) != 0; }, 5s));
}

TEST_CASE("a released embedded daemon is gone when its launcher exits") {
  test::TempDir dir;
  Process a(test::muster_cmd("run", {"-n", "2", "--cpu", "/bin/true"}),
            test::embedded_env(dir.path()));
  CHECK(a.wait(20s) == 0);
  CHECK(access((dir.path() + "/musterd.sock").c_str(), F_OK) != 0);
}

// A daemon forked while muster run's store relay listens (here: the first
// died, and the restart starts another) must not keep the relay's sockets:
// a fork without exec inherits every fd. The relay's port is the one rank 0's
// node-mates get as MASTER_PORT.
TEST_CASE("an embedded daemon started during a run holds none of the launcher's sockets") {
  test::TempDir dir;
  std::string sock = dir.path() + "/musterd.sock";
  int port = 29000 + static_cast<int>(getpid() % 500);
  Process a(test::muster_cmd("run", {"-n", "2", "--cpu", "--max-restarts", "1", "--master-port",
                                     std::to_string(port), "/bin/sh", "-c",
                                     "if [ $RANK = 1 ]; then echo relay $MASTER_PORT; exit 0; fi; "
                                     "echo attempt $TORCHELASTIC_RESTART_COUNT; sleep 1; "
                                     "[ $TORCHELASTIC_RESTART_COUNT = 1 ] && sleep 3; exit 1"}),
            test::embedded_env(dir.path()), true);
  int relay_port = 0;
  bool started = false;
  while (!relay_port || !started) {
    auto l = a.read_line(20s);
    REQUIRE(l);
    if (l->rfind("[rank1]: relay ", 0) == 0) relay_port = std::stoi(l->substr(15));
    if (*l == "[rank0]: attempt 0") started = true;
  }
  CHECK(relay_port != port);
  auto relay = listeners(relay_port);
  REQUIRE_FALSE(relay.empty());  // muster run's relay
  auto first = daemon_pid(sock);
  kill(static_cast<pid_t>(first), SIGKILL);
  std::string line;
  while (line.find("attempt 1") == std::string::npos) {
    auto l = a.read_line(20s);
    REQUIRE(l);
    line = *l;
  }
  auto second = daemon_pid(sock);
  CHECK(second != first);
  CHECK(listeners(relay_port) == relay);
  CHECK_FALSE(holds_socket(static_cast<pid_t>(second), relay));
  CHECK(holds_socket(a.pid(), relay));  // the check itself finds the launcher's
  a.signal(SIGTERM);
  a.wait(10s);
}
