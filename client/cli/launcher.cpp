#include "cli/launcher.hpp"

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

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>
#include <thread>

namespace muster::cli {

namespace {

sigset_t supervisor_set() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGCHLD);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGHUP);
  return s;
}

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

int code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) {
    const char* abbrev = sigabbrev_np(WTERMSIG(status));
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           (abbrev ? std::string("SIG") + abbrev : std::string(strsignal(WTERMSIG(status)))) + ")";
  }
  return "exited with code " + std::to_string(code_of(status));
}

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our stdout is gone: nothing better to do
    off += static_cast<size_t>(n);
  }
}

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// The guardian: a process of its own (double-forked, so not our child, in
// a session of its own, every signal but SIGKILL blocked) holding one end
// of a socket pair with muster run. muster run tells it each worker's
// process group as it is forked, and forgets the groups it has seen empty.
// When the socket reaches EOF (muster run exited, however it died) the
// guardian SIGKILLs the groups still registered, then every process whose
// environment carries the guard token (descendants that left their
// group), until none is left, and exits.
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
    if (env.compare(at, prefix.size(), prefix) == 0) {
      // A comma-separated list: an inner muster run adds its own token.
      std::string value = env.substr(at + prefix.size(), end - at - prefix.size());
      size_t p = 0;
      while (p <= value.size()) {
        size_t comma = value.find(',', p);
        if (comma == std::string::npos) comma = value.size();
        if (value.compare(p, comma - p, token) == 0) return true;
        p = comma + 1;
      }
    }
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

[[noreturn]] void guardian_main(int fd, const std::string& token) {
  setsid();  // no terminal's or launcher group's signal is meant for us
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  prctl(PR_SET_NAME, "muster-guard");
  if (chdir("/") != 0) {
  }
  int null = open("/dev/null", O_RDWR);
  for (int std_fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) dup2(null, std_fd);
  // Nothing of muster run's but the socket: its pipes must reach EOF
  // without us.
  if (DIR* d = opendir("/proc/self/fd")) {
    std::vector<int> fds;
    while (dirent* e = readdir(d))
      if (int f = std::atoi(e->d_name); f > STDERR_FILENO && f != fd && f != dirfd(d))
        fds.push_back(f);
    closedir(d);
    for (int f : fds) close(f);
  }
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

void start_guardian() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return;
  uint64_t rnd = 0;
  if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
    rnd = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
          (static_cast<uint64_t>(getpid()) << 32);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(rnd));
  int info[2];
  if (pipe2(info, O_CLOEXEC) != 0) {
    close(sv[0]);
    close(sv[1]);
    return;
  }
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
  close(sv[1]);
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

}  // namespace

void block_supervisor_signals() {
  sigset_t s = supervisor_set();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
  // Before we become a subreaper: the guardian must not be our child.
  if (g_guard.pid < 0) start_guardian();
  // Orphaned grandchildren come to us, so nothing outlives muster run.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

pid_t guardian_pid() {
  return g_guard.pid;
}

int take_pending_stop_signal() {
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    if (!sigismember(&pending, sig)) continue;
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    timespec zero{0, 0};
    sigtimedwait(&one, nullptr, &zero);
    return sig;
  }
  return 0;
}

Worker spawn_held(uint32_t rank, const std::vector<std::string>& argv,
                  const std::vector<std::string>& env, bool capture) {
  int fds[2];
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  auto close_all = [&] {
    for (int* p : {fds, out, err})
      for (int i = 0; i < 2; ++i) close_fd(p[i]);
  };
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + strerror(errno));
  if (capture && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)) {
    std::string why = strerror(errno);
    close_all();
    throw std::runtime_error("pipe: " + why);
  }
  auto cargv = c_strings(argv);
  // The guard token travels with the worker and whatever it starts.
  std::vector<std::string> env_guarded = env;
  if (!g_guard.token.empty()) {
    std::string prefix = std::string(kGuardVar) + "=";
    bool added = false;
    for (auto& kv : env_guarded)
      if (kv.compare(0, prefix.size(), prefix) == 0) {
        kv += (kv.size() > prefix.size() ? "," : "") + g_guard.token;
        added = true;
      }
    if (!added) env_guarded.push_back(prefix + g_guard.token);
  }
  auto cenv = c_strings(env_guarded);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    std::string why = strerror(errno);
    close_all();
    throw std::runtime_error("fork: " + why);
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (capture) {
      // dup2 clears close-on-exec on the copies; the originals go at exec.
      if (dup2(out[1], STDOUT_FILENO) < 0 || dup2(err[1], STDERR_FILENO) < 0) _exit(127);
    }
    close(fds[1]);
    char go = 0;
    ssize_t n;
    do n = read(fds[0], &go, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1) _exit(127);  // launcher gave up before releasing us
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    execvpe(cargv[0], cargv.data(), cenv.data());
    const char msg[] = "muster run: cannot execute the program\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so kill(-pid) works before the child runs
  guard_send(kGuardAdd, pid);
  close(fds[0]);
  // Only the worker (and what it starts) may hold the write ends, so that
  // its pipes reach EOF when it and its children are gone.
  close_fd(out[1]);
  close_fd(err[1]);
  Worker w;
  w.rank = rank;
  w.pid = pid;
  w.go_fd = fds[1];
  w.out_fd = out[0];
  w.err_fd = err[0];
  return w;
}

void release(Worker& w) {
  char go = 1;
  ssize_t n = write(w.go_fd, &go, 1);
  (void)n;
  close(w.go_fd);
  w.go_fd = -1;
}

void kill_all(std::vector<Worker>& ws, int sig) {
  for (auto& w : ws) {
    if (w.go_fd >= 0) {
      close(w.go_fd);  // a held child exits on EOF
      w.go_fd = -1;
    }
    // The whole group: a worker's own children go too.
    if (w.pid > 0) kill(-w.pid, sig);
  }
}

struct OutputPump::Impl {
  struct Stream {
    int fd = -1;
    uint32_t rank = 0;
    int dest = STDOUT_FILENO;
    std::string buf;  // an unfinished line
  };
  bool prefix;
  size_t tail_lines;
  std::vector<Stream> streams;
  std::map<uint32_t, std::deque<std::string>> tails;
  int wake[2] = {-1, -1};
  std::atomic<double> drain_s{0};
  std::thread thread;

  static constexpr size_t kMaxLine = 64 * 1024;  // longer: written out in pieces

  void keep_tail(uint32_t rank, std::string line) {
    if (line.size() > 1000) line = line.substr(0, 1000) + "...";
    auto& t = tails[rank];
    t.push_back(std::move(line));
    while (t.size() > tail_lines) t.pop_front();
  }

  void line_done(Stream& s, std::string line) {
    if (prefix) write_all(s.dest, "[rank" + std::to_string(s.rank) + "]: " + line + "\n");
    if (s.dest == STDERR_FILENO) keep_tail(s.rank, std::move(line));
  }

  void take(Stream& s, const char* data, size_t n) {
    // Without a prefix the bytes go out as they come; lines are still cut
    // for the stderr tail.
    if (!prefix) write_all(s.dest, std::string(data, n));
    if (!prefix && s.dest != STDERR_FILENO) return;
    s.buf.append(data, n);
    size_t start = 0;
    for (size_t nl; (nl = s.buf.find('\n', start)) != std::string::npos; start = nl + 1)
      line_done(s, s.buf.substr(start, nl - start));
    s.buf.erase(0, start);
    if (s.buf.size() >= kMaxLine) {
      line_done(s, std::move(s.buf));
      s.buf.clear();
    }
  }

  void end(Stream& s) {
    if (!s.buf.empty()) line_done(s, std::move(s.buf));
    s.buf.clear();
    close_fd(s.fd);
  }

  void loop() {
    using Clock = std::chrono::steady_clock;
    bool finishing = false;
    Clock::time_point deadline{};
    std::vector<char> chunk(64 * 1024);
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<Stream*> who;
      for (auto& s : streams)
        if (s.fd >= 0) {
          fds.push_back({s.fd, POLLIN, 0});
          who.push_back(&s);
        }
      if (fds.empty()) break;
      if (finishing && Clock::now() >= deadline) break;
      if (!finishing) fds.push_back({wake[0], POLLIN, 0});
      int timeout = -1;
      if (finishing)
        timeout = static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count() +
            1);
      int n = poll(fds.data(), fds.size(), timeout);
      if (n < 0 && errno != EINTR) break;
      if (n <= 0) continue;
      for (size_t i = 0; i < who.size(); ++i) {
        if (!fds[i].revents) continue;
        ssize_t got = read(who[i]->fd, chunk.data(), chunk.size());
        if (got > 0)
          take(*who[i], chunk.data(), static_cast<size_t>(got));
        else if (got == 0 || (errno != EINTR && errno != EAGAIN))
          end(*who[i]);
      }
      if (!finishing && fds.back().revents) {
        finishing = true;
        deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(drain_s.load()));
      }
    }
    // Out of time (a straggler still holds a pipe): what came is written.
    for (auto& s : streams) end(s);
  }
};

OutputPump::OutputPump(bool prefix, size_t tail_lines) : impl_(std::make_unique<Impl>()) {
  impl_->prefix = prefix;
  impl_->tail_lines = tail_lines;
  if (pipe2(impl_->wake, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + strerror(errno));
}

OutputPump::~OutputPump() {
  finish(0);
  close_fd(impl_->wake[0]);
  close_fd(impl_->wake[1]);
  for (auto& s : impl_->streams) close_fd(s.fd);
}

void OutputPump::add(Worker& w) {
  if (w.out_fd >= 0) impl_->streams.push_back({w.out_fd, w.rank, STDOUT_FILENO, {}});
  if (w.err_fd >= 0) impl_->streams.push_back({w.err_fd, w.rank, STDERR_FILENO, {}});
  w.out_fd = w.err_fd = -1;
}

void OutputPump::start() {
  impl_->thread = std::thread([this] { impl_->loop(); });
}

void OutputPump::finish(double drain_s) {
  if (!impl_->thread.joinable()) return;
  impl_->drain_s = drain_s;
  char c = 1;
  ssize_t n;
  do n = write(impl_->wake[1], &c, 1);
  while (n < 0 && errno == EINTR);
  impl_->thread.join();
}

std::deque<std::string> OutputPump::tail(uint32_t rank) const {
  auto it = impl_->tails.find(rank);
  return it == impl_->tails.end() ? std::deque<std::string>{} : it->second;
}

Outcome supervise(std::vector<Worker>& ws, double grace_s,
                  const std::function<std::string()>& world_check) {
  using Clock = std::chrono::steady_clock;
  sigset_t set = supervisor_set();
  size_t running = ws.size();
  bool stopping = false;
  Outcome result;
  Clock::time_point kill_at{};
  auto begin_stop = [&](int sig) {
    stopping = true;
    kill_at = Clock::now() +
              std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s));
    for (auto& w : ws)
      if (!w.done) kill(-w.pid, sig);
  };
  auto next_check = Clock::now();
  while (running > 0) {
    timespec ts{1, 0};
    if (world_check) {
      if (!stopping && Clock::now() >= next_check) {
        next_check = Clock::now() + std::chrono::milliseconds(250);
        if (auto why = world_check(); !why.empty()) {
          std::fprintf(stderr, "muster run: %s; stopping %zu worker(s)\n", why.c_str(), running);
          result.world_changed = why;
          result.code = 1;
          begin_stop(SIGTERM);
        }
      }
      ts = {0, 250 * 1000 * 1000};
    }
    if (stopping) {
      auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(kill_at - Clock::now());
      if (left.count() <= 0) {
        for (auto& w : ws)
          if (!w.done) kill(-w.pid, SIGKILL);
        left = std::chrono::seconds(1);
      }
      ts.tv_sec = left.count() / 1000000000;
      ts.tv_nsec = left.count() % 1000000000;
    }
    siginfo_t info;
    int sig = sigtimedwait(&set, &info, &ts);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      if (!stopping) {
        std::fprintf(stderr, "muster run: got %s, stopping %zu worker(s)\n", strsignal(sig),
                     running);
        result.code = 128 + sig;
        begin_stop(sig);
      } else {
        kill_at = Clock::now();  // asked twice: no more grace
      }
      result.interrupted = true;  // never to be restarted
    }
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (auto& w : ws) {
        if (w.pid != pid || w.done) continue;
        w.done = true;
        w.exit_code = code_of(status);
        --running;
        if (w.exit_code != 0 && !stopping && world_check) {
          // A rank that failed because the world broke (its wait said so) is
          // that, not a failure of its own.
          if (auto why = world_check(); !why.empty()) {
            std::fprintf(stderr, "muster run: %s; stopping %zu worker(s)\n", why.c_str(), running);
            result.world_changed = why;
            result.code = 1;
            begin_stop(SIGTERM);
            continue;
          }
        }
        if (w.exit_code != 0 && !stopping && result.world_changed.empty()) {
          std::fprintf(stderr,
                       "muster run: rank %u (pid %d) %s; stopping the other %zu worker(s)\n",
                       w.rank, pid, describe(status).c_str(), running);
          result.code = w.exit_code;
          result.rank = static_cast<int>(w.rank);
          result.how = describe(status);
          begin_stop(SIGTERM);
        }
      }
    }
  }
  // Leftovers in the workers' groups (daemons a worker forked) go as well.
  kill_all(ws, SIGKILL);
  auto until = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < until) {
    pid_t p = waitpid(-1, nullptr, WNOHANG);
    if (p < 0) break;  // ECHILD: nobody left
    if (p > 0) continue;
    // Enough that the workers' groups are empty (their zombies reaped above);
    // an embedded daemon, our child too, may live on.
    bool left = false;
    for (const auto& w : ws)
      if (w.pid > 0 && kill(-w.pid, 0) == 0) left = true;
    if (!left) break;
    usleep(10000);
  }
  // Empty groups need no guarding (and their ids may be reused).
  for (const auto& w : ws)
    if (w.pid > 0 && kill(-w.pid, 0) != 0 && errno == ESRCH) guard_send(kGuardForget, w.pid);
  return result;
}

}  // namespace muster::cli
