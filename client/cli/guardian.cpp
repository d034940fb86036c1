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

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>

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
  int32_t pgid;
};
constexpr int32_t kGuardAdd = 1;
constexpr int32_t kGuardForget = 2;

struct Guard {
  int fd = -1;        // muster run's end of the socket pair
  pid_t pid = -1;     // the guardian
  std::string token;  // "PID-HEX": what the guardian looks for
} g_guard;

void guard_send(int32_t op, pid_t pgid) {
  if (g_guard.fd < 0) return;
  GuardMsg m{op, static_cast<int32_t>(pgid)};
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
  for (;;) {
    GuardMsg m;
    ssize_t n = recv(fd, &m, sizeof m, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // muster run is gone (or exits)
    if (n != sizeof m || m.pgid <= 1) continue;
    if (m.op == kGuardAdd) groups.insert(m.pgid);
    if (m.op == kGuardForget) groups.erase(m.pgid);
  }
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

}  // namespace muster::cli::guardian
