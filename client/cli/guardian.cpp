#include "cli/guardian.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cli/posix_io.hpp"

namespace muster::cli::guardian {

namespace {

// The guardian holds one end of a socket pair with muster run. muster run
// tells it each worker's process group as it is forked, and forgets the
// groups it has seen empty. When the socket reaches EOF (muster run exited,
// however it died) the guardian SIGKILLs the groups still registered, then
// every process whose environment carries the guard token (descendants that
// left their group), until none is left, and exits.
constexpr const char* kGuardVar = "MUSTER_RUN_GUARD";
struct GuardMsg {
  int32_t op;
  int32_t pgid;    // a group, or for kGuardAdopt a pid
  uint64_t start;  // kGuardAdopt: the pid's start time (a reused pid is not it)
};
constexpr int32_t kGuardAdd = 1;
constexpr int32_t kGuardForget = 2;
constexpr int32_t kGuardAdopt = 3;

// muster run's side of adopt_orphans.
std::set<std::pair<pid_t, uint64_t>> g_told;
std::set<pid_t> g_exempt;

struct Guard {
  int fd = -1;        // muster run's end of the socket pair
  pid_t pid = -1;     // the guardian
  std::string token;  // "PID-HEX": what the guardian looks for
} g_guard;

void guard_send(int32_t op, pid_t pgid, uint64_t start = 0) {
  if (g_guard.fd < 0) return;
  GuardMsg m{op, static_cast<int32_t>(pgid), start};
  ssize_t n;
  do n = send(g_guard.fd, &m, sizeof m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
}

// Every child muster run forks (workers, an embedded daemon that never
// execs) lets go of the socket: only muster run's death may close it.
extern "C" void guard_in_child() {
  if (g_guard.fd >= 0) close(g_guard.fd);
  g_guard.fd = -1;
}

// A normal exit: the guardian gets EOF, kills whatever is left (nothing,
// after supervise()) and exits; wait (bounded) until it has.
extern "C" void guard_at_exit() {
  if (g_guard.fd < 0) return;
  shutdown(g_guard.fd, SHUT_WR);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    until - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) break;
    pollfd p{g_guard.fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) < 0 && errno != EINTR) break;
    char buf[sizeof(GuardMsg)];
    ssize_t n = recv(g_guard.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
  }
  close_fd(g_guard.fd);
}

// Whether a MUSTER_RUN_GUARD value (a comma-separated list) holds token.
bool list_holds(const std::string& value, const std::string& token) {
  size_t p = 0;
  while (p <= value.size()) {
    size_t comma = value.find(',', p);
    if (comma == std::string::npos) comma = value.size();
    if (value.compare(p, comma - p, token) == 0) return true;
    p = comma + 1;
  }
  return false;
}

bool carries_token(pid_t pid, const std::string& token) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/environ", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string env;
  char buf[16384];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 && env.size() < (64u << 20))
    env.append(buf, static_cast<size_t>(n));
  close(fd);
  std::string prefix = std::string(kGuardVar) + "=";
  for (size_t at = 0; at < env.size();) {
    size_t end = env.find('\0', at);
    if (end == std::string::npos) end = env.size();
    if (env.compare(at, prefix.size(), prefix) == 0 &&
        list_holds(env.substr(at + prefix.size(), end - at - prefix.size()), token))
      return true;
    at = end + 1;
  }
  return false;
}

// Field 22 of /proc/PID/stat (clock ticks after boot); 0 when gone.
uint64_t start_time(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char* p = strrchr(buf, ')');
  if (!p) return 0;
  // The blank after ")" starts field 3 (the state); the 20th blank, field 22.
  for (int field = 3; field <= 22 && p; ++field) p = strchr(p + 1, ' ');
  return p ? std::strtoull(p + 1, nullptr, 10) : 0;
}

// A process's children, from each of its threads' children file.
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> kids;
  std::string task = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(task.c_str());
  if (!d) return kids;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    int fd = open((task + "/" + e->d_name + "/children").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    std::string text;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
    close(fd);
    char* end = nullptr;
    for (const char* p = text.c_str(); *p; p = end) {
      long k = std::strtol(p, &end, 10);
      if (end == p) break;
      if (k > 0) kids.push_back(static_cast<pid_t>(k));
    }
  }
  closedir(d);
  return kids;
}

// Ends the adopted orphans and everything below them. Stopped first, all
// of them: a killed parent's children go to init, out of reach, and a
// stopped process forks no more; then killed together.
void kill_trees(const std::set<std::pair<pid_t, uint64_t>>& roots) {
  std::set<pid_t> stopped;
  for (const auto& [pid, start] : roots)
    if (start_time(pid) == start && kill(pid, SIGSTOP) == 0) stopped.insert(pid);
  for (int round = 0; round < 100; ++round) {
    bool grew = false;
    for (pid_t p : std::vector<pid_t>(stopped.begin(), stopped.end()))
      for (pid_t c : children_of(p))
        if (stopped.insert(c).second) {
          kill(c, SIGSTOP);
          grew = true;
        }
    if (!grew) break;
  }
  for (pid_t p : stopped) kill(p, SIGKILL);
}

// Kills the processes that carry the token; returns how many it found.
size_t kill_carriers(const std::string& token) {
  size_t found = 0;
  DIR* d = opendir("/proc");
  if (!d) return 0;
  pid_t self = getpid();
  while (dirent* e = readdir(d)) {
    char* end;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end || pid <= 0 || pid == self) continue;
    if (!carries_token(static_cast<pid_t>(pid), token)) continue;
    if (kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++found;
  }
  closedir(d);
  return found;
}

// Out of muster run's way: no terminal's or launcher group's signal is
// meant for the guardian, and nothing of muster run's but the socket stays
// open, so that its pipes reach EOF without us.
void detach(int keep_fd) {
  setsid();
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  prctl(PR_SET_NAME, "muster-guard");
  if (chdir("/") != 0) {
  }
  int null = open("/dev/null", O_RDWR);
  for (int std_fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) dup2(null, std_fd);
  if (DIR* d = opendir("/proc/self/fd")) {
    std::vector<int> fds;
    while (dirent* e = readdir(d))
      if (int f = std::atoi(e->d_name); f > STDERR_FILENO && f != keep_fd && f != dirfd(d))
        fds.push_back(f);
    closedir(d);
    for (int f : fds) close(f);
  }
}

[[noreturn]] void guardian_main(int fd, const std::string& token) {
  detach(fd);
  std::set<pid_t> groups;
  std::set<std::pair<pid_t, uint64_t>> adopted;
  for (;;) {
    GuardMsg m;
    ssize_t n = recv(fd, &m, sizeof m, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // muster run is gone (or exits)
    if (n != sizeof m || m.pgid <= 1) continue;
    if (m.op == kGuardAdd) groups.insert(m.pgid);
    if (m.op == kGuardForget) groups.erase(m.pgid);
    if (m.op == kGuardAdopt) adopted.emplace(m.pgid, m.start);
  }
  kill_trees(adopted);
  // Rounds until no carrier is left (one may be forking while we look).
  for (int round = 0; round < 100; ++round) {
    for (pid_t g : groups) kill(-g, SIGKILL);
    if (kill_carriers(token) == 0) break;
    usleep(5000);
  }
  _exit(0);
}

std::string random_hex() {
  uint64_t rnd = 0;
  if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
    rnd = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
          (static_cast<uint64_t>(getpid()) << 32);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(rnd));
  return hex;
}

// Double-forks the guardian with sv[1]; returns its pid (-1 when it could
// not be started), read back from the middle child through a pipe.
pid_t fork_guardian(int sv[2], const std::string& hex) {
  int info[2];
  if (pipe2(info, O_CLOEXEC) != 0) return -1;
  pid_t mid = fork();
  if (mid == 0) {
    pid_t g = fork();
    if (g == 0) {
      close(sv[0]);
      close(info[0]);
      close(info[1]);
      guardian_main(sv[1], std::to_string(getpid()) + "-" + hex);
    }
    ssize_t w = write(info[1], &g, sizeof g);
    (void)w;
    _exit(0);
  }
  close(info[1]);
  pid_t g = -1;
  if (mid > 0) {
    ssize_t r;
    do r = read(info[0], &g, sizeof g);
    while (r < 0 && errno == EINTR);
    if (r != sizeof g) g = -1;
    waitpid(mid, nullptr, 0);
  }
  close(info[0]);
  return g;
}

}  // namespace

void start() {
  if (g_guard.pid >= 0) return;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return;
  std::string hex = random_hex();
  pid_t g = fork_guardian(sv, hex);
  close(sv[1]);
  if (g <= 0) {
    close(sv[0]);
    return;
  }
  g_guard.fd = sv[0];
  g_guard.pid = g;
  g_guard.token = std::to_string(g) + "-" + hex;
  pthread_atfork(nullptr, nullptr, guard_in_child);
  std::atexit(guard_at_exit);
}

pid_t pid() {
  return g_guard.pid;
}

void add_token(std::vector<std::string>& env) {
  if (g_guard.token.empty()) return;
  std::string prefix = std::string(kGuardVar) + "=";
  bool added = false;
  for (auto& kv : env)
    if (kv.compare(0, prefix.size(), prefix) == 0) {
      kv += (kv.size() > prefix.size() ? "," : "") + g_guard.token;
      added = true;
    }
  if (!added) env.push_back(prefix + g_guard.token);
}

void watch_group(pid_t pgid) {
  guard_send(kGuardAdd, pgid);
}

void forget_group(pid_t pgid) {
  guard_send(kGuardForget, pgid);
}

void adopt_orphans(const std::vector<pid_t>& workers) {
  if (g_guard.fd < 0) return;
  for (pid_t c : children_of(getpid())) {
    if (g_exempt.count(c) || std::find(workers.begin(), workers.end(), c) != workers.end())
      continue;
    uint64_t start = start_time(c);
    if (start && g_told.emplace(c, start).second) guard_send(kGuardAdopt, c, start);
  }
}

void exempt(pid_t pid) {
  g_exempt.insert(pid);
}

}  // namespace muster::cli::guardian
