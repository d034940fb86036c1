#include "cli/embedded.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "cli/guardian.hpp"
#include "dirs/runtime_dir.hpp"
#include "endpoint.hpp"
#include "log.hpp"
#include "muster/client.hpp"
#include "peer/secure.hpp"
#include "server/server.hpp"

namespace muster::cli {

namespace {

bool answers(const std::string& endpoint) {
  // No socket file, no daemon: skip the ping's timeout.
  struct stat st {};
  if (!ipc_dir_of(endpoint).empty() && ::stat(endpoint.substr(6).c_str(), &st) != 0) return false;
  try {
    Client c({endpoint, std::chrono::milliseconds(500)});
    c.ping();
    return true;
  } catch (const Error& e) {
    // Another user's directory or daemon (common/trust.hpp): say so, rather
    // than start a daemon of ours that could not serve there either.
    if (e.code() == ErrorCode::kPermissionDenied) throw;
    return false;
  }
}

daemon::Server* g_server = nullptr;
extern "C" void on_stop_signal(int) {
  if (g_server) g_server->stop();
}
extern "C" void on_leave_signal(int) {
  if (g_server) g_server->leave_when_idle();
}

// The launcher's side: a pidfd of the embedded daemon it started, so that
// release_embedded_daemon() cannot signal another process that reused the
// pid (the supervisor reaps any child that exits).
int g_daemon_pidfd = -1;

// The forked daemon: never returns.
daemon::Config embedded_config(const std::string& dir, int simulate_gpus,
                               const EmbeddedPeering& peering, bool listen) {
  daemon::Config cfg;
  cfg.runtime_dir = dir;
  cfg.simulate_gpus = simulate_gpus;
  cfg.exit_when_idle = true;
  cfg.peer_keys.plain = peering.plain;
  if (!peering.key_file.empty()) cfg.peer_keys.own = daemon::peer::read_key_file(peering.key_file);
  if (!peering.authorized_keys.empty())
    cfg.peer_keys.authorized_keys = daemon::peer::read_authorized_keys(peering.authorized_keys);
  if (listen) {
    cfg.peer_bind = peering.listen_host;
    cfg.peer_port = peering.listen_port;
  }
  return cfg;
}

// Closes every fd from 3 up but `keep`. A fork without exec keeps all of
// the launcher's (its store relay's listener and connections, its
// workers' pipes, an older daemon's pidfd), and a daemon that outlives its
// launcher would hold them open: the relay's port stays taken, and closing
// a connection there sends no FIN.
void close_inherited_fds(int keep) {
  auto close_from_to = [](unsigned lo, unsigned hi) {
    if (lo > hi || close_range(lo, hi, 0) == 0) return;
    for (unsigned fd = lo; fd <= std::min(hi, 65535u); ++fd) close(static_cast<int>(fd));
  };
  unsigned k = static_cast<unsigned>(keep);
  close_from_to(3, k - 1);
  close_from_to(k + 1, ~0u);
}

[[noreturn]] void run_embedded(const std::string& dir, int simulate_gpus,
                               const EmbeddedPeering& peering, int ready_fd) {
  setsid();  // the terminal's Ctrl-C is for the launcher, which stops its workers
  close_inherited_fds(ready_fd);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sa.sa_handler = on_leave_signal;
  sigaction(SIGUSR1, &sa, nullptr);  // release_embedded_daemon()
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  dup2(null, STDIN_FILENO);
  dup2(null, STDOUT_FILENO);
  // Quiet unless asked: the launcher's output is the user's program's.
  log::Level lvl = log::Level::kError;
  const char* l = std::getenv("MUSTER_LOG_LEVEL");
  if (!(l && log::parse_level(l, lvl))) dup2(null, STDERR_FILENO);
  log::set_level(lvl);
  int code = 0;
  try {
    std::unique_ptr<daemon::Server> made;
    bool listen = !peering.listen_host.empty();
    try {
      made = std::make_unique<daemon::Server>(embedded_config(dir, simulate_gpus, peering, listen));
      made->bind();
    } catch (const Error& e) {
      // Another node's launcher on this machine took the coordinator's
      // port first: be a plain node of the job instead.
      if (!listen || e.code() != ErrorCode::kInternal) throw;
      log::info(std::string("not hosting the coordinator: ") + e.what());
      made.reset();
      made = std::make_unique<daemon::Server>(embedded_config(dir, simulate_gpus, peering, false));
      made->bind();
    }
    daemon::Server& server = *made;
    g_server = &server;
    char ok = 1;
    ssize_t w = write(ready_fd, &ok, 1);
    (void)w;
    close(ready_fd);
    server.run();
    g_server = nullptr;
  } catch (const Error& e) {
    log::error(e.what());
    code = e.code() == ErrorCode::kConflict ? 3 : 1;
  }
  // Not exit(): the launcher's static state (its ZeroMQ context) is not ours.
  _exit(code);
}

}  // namespace

std::string coordinator_address_to_host(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return "";
  std::string local;
  bool taken = false;
  for (auto* a = res; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // Someone accepts there already (a node daemon, another launcher).
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) taken = true;
    close(fd);
    // Binding to an address (any port) works only where it is ours.
    sockaddr_storage any{};
    std::memcpy(&any, a->ai_addr, a->ai_addrlen);
    if (any.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&any)->sin_port = 0;
    if (any.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&any)->sin6_port = 0;
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
    char numeric[NI_MAXHOST];
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&any), a->ai_addrlen) == 0 &&
        local.empty() &&
        getnameinfo(a->ai_addr, a->ai_addrlen, numeric, sizeof numeric, nullptr, 0,
                    NI_NUMERICHOST) == 0)
      local = any.ss_family == AF_INET6 ? "[" + std::string(numeric) + "]" : numeric;
    if (fd >= 0) close(fd);
  }
  freeaddrinfo(res);
  return taken ? "" : local;
}

bool daemon_answers(const std::string& endpoint) {
  return answers(endpoint);
}

void ensure_daemon(const std::string& endpoint, int simulate_gpus, const EmbeddedPeering& peering) {
  if (answers(endpoint)) return;
  auto dir = ipc_dir_of(endpoint);
  if (dir.empty() || endpoint != endpoint_for_dir(dir))
    throw Error(ErrorCode::kUnavailable,
                "no musterd answers at " + endpoint +
                    ", and an embedded daemon can only serve an ipc://DIR/musterd.sock endpoint");
  // The directory the daemon would make and check, here: a refusal (another
  // user's directory) is then our error, not a child's silent exit.
  daemon::prepare_runtime_dir(dir, "MUSTER_RUNTIME_DIR=DIR");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(ErrorCode::kInternal, "pipe failed");
  pid_t pid = fork();
  if (pid < 0) throw Error(ErrorCode::kInternal, "fork failed");
  if (pid == 0) {
    close(fds[0]);
    run_embedded(dir, simulate_gpus, peering, fds[1]);
  }
  close(fds[1]);
  guardian::exempt(pid);  // it serves other launchers' jobs too
  char ok = 0;
  ssize_t n = read(fds[0], &ok, 1);  // EOF: the child failed to bind
  close(fds[0]);
  if (n == 1 && answers(endpoint)) {
    if (g_daemon_pidfd >= 0) close(g_daemon_pidfd);
    g_daemon_pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));  // -1: never released
    return;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  // Another launcher's daemon won the race for the directory: use it.
  for (int i = 0; i < 50; ++i) {
    if (answers(endpoint)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw Error(ErrorCode::kUnavailable,
              "could not start an embedded musterd in " + dir +
                  (WIFEXITED(status) && WEXITSTATUS(status) == 3
                       ? " (another musterd holds the directory but does not answer)"
                       : " (set MUSTER_LOG_LEVEL=info to see why)"));
}

void release_embedded_daemon(const std::string& endpoint, const std::string& job) {
  if (g_daemon_pidfd < 0) return;
  // Serving another launcher's job, it stays for that launcher's restarts
  // (its usual linger after the last job); and when it cannot be asked.
  bool others = true;
  try {
    ClientOptions co{endpoint};
    co.request_timeout = co.wait_timeout = std::chrono::milliseconds(1000);
    others = false;
    for (const auto& j : Client(co).status().jobs) others = others || j.id != job;
  } catch (const Error&) {
    others = true;
  }
  // ESRCH when it already stopped: nothing to do.
  if (!others) syscall(SYS_pidfd_send_signal, g_daemon_pidfd, SIGUSR1, nullptr, 0);
  close(g_daemon_pidfd);
  g_daemon_pidfd = -1;
}

}  // namespace muster::cli
