#include "cli/launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
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

}  // namespace

void block_supervisor_signals() {
  sigset_t s = supervisor_set();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
  // Orphaned grandchildren come to us, so nothing outlives muster run.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
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
  auto cenv = c_strings(env);
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

Outcome supervise(std::vector<Worker>& ws, double grace_s) {
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
  while (running > 0) {
    timespec ts{1, 0};
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
        if (w.exit_code != 0 && !stopping) {
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
  return result;
}

}  // namespace muster::cli
