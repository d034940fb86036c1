#include "cli/supervisor.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "cli/guardian.hpp"

namespace muster::cli {

namespace {

using Clock = std::chrono::steady_clock;

sigset_t supervisor_set() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGCHLD);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGHUP);
  for (int sig : {SIGUSR1, SIGUSR2, SIGCONT}) sigaddset(&s, sig);
  return s;
}

// Slurm's step daemon signals every process of the step itself (scancel,
// srun --signal=USR1@60) under its process tracking (cgroup, linuxproc): the
// workers have their copy, and a second one from us could make a rank
// checkpoint twice.
bool from_slurm_step(pid_t sender) {
  std::ifstream comm("/proc/" + std::to_string(sender) + "/comm");
  std::string name;
  return sender > 0 && std::getline(comm, name) && name == "slurmstepd";
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

// One supervise() call: the workers still running, whether they are being
// stopped (and when the grace ends), and the outcome so far.
class Supervision {
 public:
  Supervision(std::vector<Worker>& ws, double grace_s,
              const std::function<std::string()>& world_check)
      : ws_(ws), grace_s_(grace_s), world_check_(world_check), running_(ws.size()) {
    for (const auto& w : ws_) pids_.push_back(w.pid);
  }

  Outcome run() {
    sigset_t set = supervisor_set();
    while (running_ > 0) {
      guardian::adopt_orphans(pids_);
      timespec ts = next_wait();
      siginfo_t info;
      on_signal(sigtimedwait(&set, &info, &ts), info);
      reap();
    }
    return result_;
  }

 private:
  void begin_stop(int sig) {
    stopping_ = true;
    stop_signal_ = sig;
    kill_at_ = Clock::now() +
               std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s_));
    for (auto& w : ws_)
      if (!w.done) kill(-w.pid, sig);
  }

  void stop_for_world(const std::string& why) {
    std::fprintf(stderr, "muster run: %s; stopping %zu worker(s)\n", why.c_str(), running_);
    result_.world_changed = why;
    result_.code = 1;
    begin_stop(SIGTERM);
  }

  // Asks world_check when it is due; returns how long to wait for a signal,
  // SIGKILLing the group once its grace is over. At most 250 ms: orphans
  // are told to the guardian between waits.
  timespec next_wait() {
    timespec ts{0, 250 * 1000 * 1000};
    if (world_check_) {
      if (!stopping_ && Clock::now() >= next_check_) {
        next_check_ = Clock::now() + std::chrono::milliseconds(250);
        if (auto why = world_check_(); !why.empty()) stop_for_world(why);
      }
    }
    if (stopping_) {
      auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(kill_at_ - Clock::now());
      if (left.count() <= 0) {
        if (!said_kill_) say_kill();
        for (auto& w : ws_)
          if (!w.done) kill(-w.pid, SIGKILL);
        left = std::chrono::seconds(1);
      }
      left = std::min<std::chrono::nanoseconds>(left, std::chrono::milliseconds(250));
      ts.tv_sec = left.count() / 1000000000;
      ts.tv_nsec = left.count() % 1000000000;
    }
    return ts;
  }

  // One line, as torchrun logs its forced exit: a worker that kept running
  // through its grace (a checkpoint too slow, a SIGTERM ignored) lost work.
  void say_kill() {
    said_kill_ = true;
    std::string who;
    for (const auto& w : ws_)
      if (!w.done)
        who += (who.empty() ? "" : ", ") + std::to_string(w.rank) + " (pid " +
               std::to_string(w.pid) + ")";
    if (who.empty()) return;
    const char* abbrev = sigabbrev_np(stop_signal_);
    if (asked_twice_)
      std::fprintf(stderr, "muster run: asked again to stop: killing rank(s) %s with SIGKILL\n",
                   who.c_str());
    else
      std::fprintf(stderr,
                   "muster run: rank(s) %s still running %g s after SIG%s: killing them with "
                   "SIGKILL (--grace-period)\n",
                   who.c_str(), grace_s_, abbrev ? abbrev : "TERM");
  }

  void on_signal(int sig, const siginfo_t& info) {
    if (sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGCONT) return pass_on(sig, info.si_pid);
    if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP) return;
    if (!stopping_) {
      std::fprintf(stderr, "muster run: got %s, stopping %zu worker(s)\n", strsignal(sig),
                   running_);
      result_.code = 128 + sig;
      begin_stop(sig);
    } else {
      kill_at_ = Clock::now();  // asked twice: no more grace
      asked_twice_ = true;
    }
    result_.interrupted = true;  // never to be restarted
  }

  // Signals meant for the program (a checkpoint request before the job's
  // time runs out, a wake-up) go to every worker's group; muster run itself
  // carries on.
  void pass_on(int sig, pid_t sender) {
    if (from_slurm_step(sender)) return;
    if (sig != SIGCONT)
      std::fprintf(stderr, "muster run: got %s, passing it to %zu worker(s)\n", strsignal(sig),
                   running_);
    for (auto& w : ws_)
      if (!w.done) kill(-w.pid, sig);
  }

  void exited(Worker& w, int status) {
    w.done = true;
    w.exit_code = code_of(status);
    --running_;
    if (w.exit_code != 0 && !stopping_ && world_check_) {
      // A rank that failed because the world broke (its wait said so) is
      // that, not a failure of its own.
      if (auto why = world_check_(); !why.empty()) return stop_for_world(why);
    }
    if (w.exit_code != 0 && !stopping_ && result_.world_changed.empty()) {
      std::fprintf(stderr, "muster run: rank %u (pid %d) %s; stopping the other %zu worker(s)\n",
                   w.rank, w.pid, describe(status).c_str(), running_);
      result_.code = w.exit_code;
      result_.rank = static_cast<int>(w.rank);
      result_.how = describe(status);
      begin_stop(SIGTERM);
    }
  }

  void reap() {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
      for (auto& w : ws_)
        if (w.pid == pid && !w.done) exited(w, status);
  }

  std::vector<Worker>& ws_;
  std::vector<pid_t> pids_;  // the workers: not orphans
  double grace_s_;
  const std::function<std::string()>& world_check_;
  size_t running_;
  bool stopping_ = false;
  int stop_signal_ = SIGTERM;
  bool said_kill_ = false, asked_twice_ = false;
  Clock::time_point kill_at_{};
  Clock::time_point next_check_ = Clock::now();
  Outcome result_;
};

// Leftovers in the workers' groups (daemons a worker forked) go as well;
// waits (up to 2 s) until the groups are empty.
void clear_groups(std::vector<Worker>& ws) {
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
    if (w.pid > 0 && kill(-w.pid, 0) != 0 && errno == ESRCH) guardian::forget_group(w.pid);
}

}  // namespace

void block_supervisor_signals() {
  sigset_t s = supervisor_set();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
  // Before we become a subreaper: the guardian must not be our child.
  guardian::start();
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

Outcome supervise(std::vector<Worker>& ws, double grace_s,
                  const std::function<std::string()>& world_check) {
  Outcome result = Supervision(ws, grace_s, world_check).run();
  // The last workers' orphans too (a worker that ends right after it
  // forked them), before the groups are cleared.
  std::vector<pid_t> pids;
  for (const auto& w : ws) pids.push_back(w.pid);
  guardian::adopt_orphans(pids);
  clear_groups(ws);
  return result;
}

}  // namespace muster::cli
