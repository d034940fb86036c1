#include "cli/spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "cli/guardian.hpp"
#include "cli/posix_io.hpp"

namespace muster::cli {

namespace {

// The fd limit muster run was given, for its workers (raise_fd_limit()).
rlimit g_given_nofile{};
bool g_nofile_raised = false;

// Says which program could not run and why, with write(2) alone (the
// child of a threaded launcher), then exits 127 as a shell does.
[[noreturn]] void exec_failed(const char* program, int err) {
  const char* why = err == ENOENT    ? "no such file, and none of that name on PATH"
                    : err == EACCES  ? "permission denied"
                    : err == ENOEXEC ? "not an executable format"
                                     : "exec failed";
  for (const char* part : {"muster run: cannot execute ", program, ": ", why, "\n"}) {
    ssize_t w = write(STDERR_FILENO, part, strlen(part));
    (void)w;
  }
  _exit(127);
}

// The child's side, from fork to exec: only async-signal-safe calls.
[[noreturn]] void held_child(pid_t parent, int go[2], int out_w, int err_w, bool capture,
                             const PinMasks& pin, char* const* argv, char* const* envp) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  if (capture) {
    // dup2 clears close-on-exec on the copies; the originals go at exec.
    if (dup2(out_w, STDOUT_FILENO) < 0 || dup2(err_w, STDERR_FILENO) < 0) _exit(127);
  }
  close(go[1]);
  char c = 0;
  ssize_t n;
  do n = read(go[0], &c, 1);
  while (n < 0 && errno == EINTR);
  if (n != 1) _exit(127);  // launcher gave up before releasing us
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
  // After the release, not before: the daemon may have moved this process
  // into the job's cgroup meanwhile, and joining a cgroup with a cpuset
  // may reset the CPUs a process runs on to the cgroup's (older kernels).
  apply_pin(pin);
  if (g_nofile_raised) setrlimit(RLIMIT_NOFILE, &g_given_nofile);
  execvpe(argv[0], argv, envp);
  exec_failed(argv[0], errno);
}

}  // namespace

void raise_fd_limit() {
  rlimit r{};
  if (g_nofile_raised || getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  g_given_nofile = r;
  r.rlim_cur = r.rlim_max;
  g_nofile_raised = setrlimit(RLIMIT_NOFILE, &r) == 0;
}

Worker spawn_held(uint32_t rank, const std::vector<std::string>& argv,
                  const std::vector<std::string>& env, bool capture, const PinMasks& pin) {
  int go[2];
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  auto close_all = [&] {
    for (int* p : {go, out, err})
      for (int i = 0; i < 2; ++i) close_fd(p[i]);
  };
  if (pipe2(go, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + strerror(errno));
  if (capture && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)) {
    std::string why = strerror(errno);
    close_all();
    throw std::runtime_error("pipe: " + why);
  }
  auto cargv = c_strings(argv);
  std::vector<std::string> env_guarded = env;
  guardian::add_token(env_guarded);
  auto cenv = c_strings(env_guarded);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    std::string why = strerror(errno);
    close_all();
    throw std::runtime_error("fork: " + why);
  }
  if (pid == 0) held_child(parent, go, out[1], err[1], capture, pin, cargv.data(), cenv.data());
  setpgid(pid, pid);  // also here, so kill(-pid) works before the child runs
  guardian::watch_group(pid);
  close(go[0]);
  // Only the worker (and what it starts) may hold the write ends, so that
  // its pipes reach EOF when it and its children are gone.
  close_fd(out[1]);
  close_fd(err[1]);
  Worker w;
  w.rank = rank;
  w.pid = pid;
  w.go_fd = go[1];
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

}  // namespace muster::cli
