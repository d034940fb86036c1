#include "cli/launcher.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

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
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "exited with code " + std::to_string(code_of(status));
}

}  // namespace

void block_supervisor_signals() {
  sigset_t s = supervisor_set();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
  // Orphaned grandchildren come to us, so nothing outlives muster run.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

Worker spawn_held(uint32_t rank, const std::vector<std::string>& argv,
                  const std::vector<std::string>& env) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + strerror(errno));
  auto cargv = c_strings(argv);
  auto cenv = c_strings(env);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error(std::string("fork: ") + strerror(errno));
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
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
  Worker w;
  w.rank = rank;
  w.pid = pid;
  w.go_fd = fds[1];
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

int supervise(std::vector<Worker>& ws, double grace_s) {
  using Clock = std::chrono::steady_clock;
  sigset_t set = supervisor_set();
  size_t running = ws.size();
  bool stopping = false;
  int result = 0;
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
        result = 128 + sig;
        begin_stop(sig);
      } else {
        kill_at = Clock::now();  // asked twice: no more grace
      }
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
          result = w.exit_code;
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
    if (p == 0) usleep(10000);
  }
  return result;
}

}  // namespace muster::cli
