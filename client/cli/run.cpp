// `muster run`: torchrun's job on one node, with the daemon keeping the books.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>

#include "cli/commands.hpp"
#include "cli/embedded.hpp"
#include "cli/launcher.hpp"
#include "cli/run_options.hpp"
#include "endpoint.hpp"
#include "muster/client.hpp"

extern char** environ;

namespace muster::cli {

namespace {

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 29500;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 29500;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

std::string generated_job_id() {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  char buf[64];
  std::snprintf(buf, sizeof buf, "job-%d-%llx", getpid(), static_cast<unsigned long long>(ms));
  return buf;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> worker_argv(const RunOptions& o, uint32_t local_rank) {
  std::vector<std::string> argv;
  if (!o.no_python && ends_with(o.program, ".py")) {
    const char* py = std::getenv("MUSTER_PYTHON");
    argv = {py && *py ? py : "python3", "-u"};
  }
  argv.push_back(o.program);
  // torch.distributed.launch's convention: before the program's own arguments.
  if (!o.use_env) argv.push_back("--local_rank=" + std::to_string(local_rank));
  argv.insert(argv.end(), o.args.begin(), o.args.end());
  return argv;
}

std::vector<std::string> worker_env(const std::map<std::string, std::string>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (!set.count(kv.substr(0, kv.find('=')))) env.push_back(kv);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

}  // namespace

int run_main(const std::vector<std::string>& args) {
  std::optional<RunOptions> parsed;
  try {
    parsed = parse_run_options(args);
  } catch (const std::exception& e) {
    std::cerr << "muster run: " << e.what() << "\nTry 'muster run --help'.\n";
    return 2;
  }
  if (!parsed) return 0;
  const RunOptions& o = *parsed;

  block_supervisor_signals();
  std::string endpoint = resolve_endpoint();
  std::vector<Worker> workers;
  int code = 1;
  try {
    ensure_daemon(endpoint, o.simulate_gpus);
    Client client({endpoint});
    std::string job = o.job_id.empty() ? generated_job_id() : o.job_id;
    auto devices = client.reserve(job, o.nproc, !o.cpu, o.devices, getpid());
    int port = o.master_port ? o.master_port : free_port();
    for (uint32_t r = 0; r < o.nproc; ++r) {
      std::map<std::string, std::string> vars = {
          {"RANK", std::to_string(r)},
          {"LOCAL_RANK", std::to_string(r)},
          {"GROUP_RANK", "0"},
          {"ROLE_RANK", std::to_string(r)},
          {"WORLD_SIZE", std::to_string(o.nproc)},
          {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
          {"ROLE_WORLD_SIZE", std::to_string(o.nproc)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"TORCHELASTIC_RESTART_COUNT", "0"},
          {"TORCHELASTIC_MAX_RESTARTS", "0"},
          {"TORCHELASTIC_RUN_ID", job},
          {"MUSTER_ENDPOINT", endpoint},
          {"MUSTER_JOB_ID", job},
          {"MUSTER_WANTS_GPU", o.cpu ? "0" : "1"},
          {"MUSTER_DEVICE", std::to_string(devices[r])},
          {"MUSTER_GENERATION", "0"},
      };
      // torchrun's default: N ranks on one node must not each spawn N threads.
      if (o.nproc > 1 && !std::getenv("OMP_NUM_THREADS")) vars["OMP_NUM_THREADS"] = "1";
      workers.push_back(spawn_held(r, worker_argv(o, r), worker_env(vars)));
    }
    std::vector<int64_t> pids;
    for (const auto& w : workers) pids.push_back(w.pid);
    client.attach(job, pids);
    for (auto& w : workers) release(w);
    code = supervise(workers, o.grace_s);
  } catch (const std::exception& e) {
    std::cerr << "muster run: " << e.what() << "\n";
    kill_all(workers, SIGKILL);
    code = 1;
  }
  return code;
}

}  // namespace muster::cli
