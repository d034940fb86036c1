#include "cli/slurm_task.hpp"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "cli/embedded.hpp"
#include "cli/flag_parser.hpp"
#include "cli/rendezvous_wait.hpp"
#include "cli/run_gpus.hpp"
#include "cli/worker_argv.hpp"
#include "cli/worker_vars.hpp"
#include "device_list.hpp"
#include "muster/client.hpp"
#include "muster/launcher.hpp"
#include "slurm/step.hpp"

namespace muster::cli {

namespace {

using Clock = std::chrono::steady_clock;

std::string exe_of(const std::string& pid) {
  char buf[4096];
  ssize_t n = readlink(("/proc/" + pid + "/exe").c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// The environment a process was started with (a task's SLURM_* variables).
EnvMap environ_of(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/environ", std::ios::binary);
  EnvMap env;
  std::string kv;
  while (std::getline(in, kv, '\0')) {
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

// The uid every one of whose ids (real, effective, saved, filesystem) a
// process runs as; -1 when they differ or it is gone.
int64_t sole_uid_of(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Uid:", 0) == 0) {
      std::istringstream ids(line.substr(4));
      long long a = -1, b = -2, c = -3, d = -4;
      ids >> a >> b >> c >> d;
      return a == b && b == c && c == d ? a : -1;
    }
  return -1;
}

// This node's tasks of the step, by SLURM_LOCALID: the processes running
// this muster that belong to this task's Slurm step as the kernel says
// (common/slurm/step.hpp: a Slurm cgroup, or the step's slurmstepd above
// them) and run as this task's user alone. A process of another uid, or
// one outside the step that merely copied its SLURM_* variables, is none
// of them whatever its environment says; only then is SLURM_LOCALID read,
// from processes that are the step's own. srun starts them together; a
// task started through a wrapper that execs muster counts, the wrapper
// does not.
std::map<uint32_t, pid_t> step_tasks(const slurm::Step& step) {
  std::map<uint32_t, pid_t> tasks;
  const std::string self = exe_of("self");
  const int64_t me = static_cast<int64_t>(::getuid());
  DIR* d = opendir("/proc");
  if (!d) throw std::runtime_error("cannot read /proc to find this node's tasks");
  while (dirent* e = readdir(d)) {
    std::string pid = e->d_name;
    if (pid.find_first_not_of("0123456789") != std::string::npos || exe_of(pid) != self ||
        sole_uid_of(pid) != me || slurm::step_of(std::stoll(pid)) != step)
      continue;
    auto env = environ_of(pid);
    auto local = env.find("SLURM_LOCALID");
    if (local == env.end() || local->second.empty() ||
        local->second.find_first_not_of("0123456789") != std::string::npos ||
        local->second.size() > 4)
      continue;
    tasks[static_cast<uint32_t>(std::stoul(local->second))] = std::stoi(pid);
  }
  closedir(d);
  return tasks;
}

// This task's own step, from the kernel.
slurm::Step my_step() {
  auto step = slurm::step_of(::getpid());
  if (!step)
    throw std::runtime_error(
        "--slurm-task: this process is in no Slurm job step that the kernel shows (no Slurm "
        "cgroup, no slurmstepd above it): run it as a task of srun");
  return *step;
}

// The reservation's launcher, a child that lives until every task of the
// node has ended. Not a task itself: the daemon ends a job's leftovers when
// its launcher exits, and local task 0, being rank 0 too, may end first.
// It ignores every signal but SIGKILL (scancel --signal=USR1 must not end
// the job through it); once the tasks are gone it goes too.
pid_t start_keeper(const std::vector<int64_t>& pids) {
  std::vector<pollfd> fds;
  for (auto pid : pids) {
    int fd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
    if (fd < 0) throw std::runtime_error("task pid " + std::to_string(pid) + " is gone");
    fds.push_back({fd, POLLIN, 0});
  }
  pid_t k = fork();
  if (k < 0) throw std::runtime_error("fork failed");
  if (k == 0) {  // only async-signal-safe calls from here: the parent has threads
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, nullptr);
    size_t left = fds.size();
    while (left > 0) {
      if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) _exit(1);
      for (auto& f : fds)
        if (f.fd >= 0 && (f.revents & (POLLIN | POLLHUP))) {
          close(f.fd);
          f.fd = -1;  // poll skips it from now on
          --left;
        }
    }
    _exit(0);
  }
  for (auto& f : fds) close(f.fd);
  return k;
}

std::chrono::milliseconds ms(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

// Local task 0: once every task of the node runs, books the node's ranks
// (the step's GPUs only), joins the world (nodes > 1) and hands each rank
// to its task's pid.
muster::Reservation lead_node(const RunOptions& o, const std::string& endpoint, muster::World& at,
                              const std::vector<int>& allowed) {
  const SlurmWorld& w = *o.slurm_world;
  const auto mine = my_step();
  auto until = Clock::now() + ms(o.rdzv_timeout_s);
  auto tasks = step_tasks(mine);
  while (tasks.size() < w.local_world_size) {
    if (Clock::now() > until)
      throw std::runtime_error("only " + std::to_string(tasks.size()) + " of this node's " +
                               std::to_string(w.local_world_size) +
                               " tasks of the step run muster run --slurm-task");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    tasks = step_tasks(mine);
  }
  std::vector<int64_t> pids;
  for (uint32_t l = 0; l < w.local_world_size; ++l) pids.push_back(tasks.at(l));
  Client c({endpoint});
  auto booked = muster::reserve(c, o.job_id, o.nproc, !o.cpu, allowed, start_keeper(pids), 0);
  if (w.num_nodes > 1) {
    muster::RendezvousOptions r;
    r.coordinator = o.coordinator;
    r.via = o.join_via;
    r.node_rank = o.node_rank;
    r.min_nodes = r.max_nodes = w.num_nodes;
    r.last_call = ms(o.last_call_s);
    r.timeout = ms(o.rdzv_timeout_s);
    r.master_addr = o.local_addr;
    r.master_port = at.master_port;
    auto world = wait_for_world(endpoint, o.job_id, r, "muster run");
    if (world.rank_offset != at.rank_offset || world.world_size != at.world_size)
      throw std::runtime_error(
          "the nodes' daemons formed ranks " + std::to_string(world.rank_offset) + ".. of " +
          std::to_string(world.world_size) + ", but Slurm numbers this " + "node's tasks from " +
          std::to_string(at.rank_offset) + " of " + std::to_string(at.world_size));
    at.generation = world.generation;
  }
  muster::attach(c, o.job_id, pids);
  return booked;
}

// The other tasks: wait until local task 0 handed this task its rank.
muster::Reservation wait_for_rank(const RunOptions& o, const std::string& endpoint,
                                  muster::World& at) {
  const SlurmWorld& w = *o.slurm_world;
  auto until = Clock::now() + ms(o.rdzv_timeout_s + 10);
  auto leader = step_tasks(my_step());
  pid_t lead = leader.count(0) ? leader.at(0) : 0;
  Client c({endpoint});
  for (;;) {
    for (const auto& job : c.status().jobs) {
      if (job.id != o.job_id) continue;
      muster::Reservation booked{job.generation, std::vector<int>(o.nproc, -1)};
      bool mine = false;
      for (const auto& r : job.ranks) {
        if (r.local_rank < o.nproc) booked.devices[r.local_rank] = r.device;
        mine = mine || (r.local_rank == w.local_rank && r.pid == getpid());
      }
      at.generation = job.generation;
      if (mine) return booked;
    }
    if (lead > 0 && kill(lead, 0) != 0)
      throw std::runtime_error("local task 0 of this node (pid " + std::to_string(lead) +
                               ") ended before it handed out the ranks");
    if (Clock::now() > until)
      throw std::runtime_error(
          "local task 0 of this node did not hand out the ranks within "
          "--rdzv-timeout");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

[[noreturn]] void exec_program(const std::vector<std::string>& argv,
                               const std::vector<std::string>& env) {
  std::vector<char*> a, e;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  e.push_back(nullptr);
  execvpe(a[0], a.data(), e.data());
  int err = errno;
  std::cerr << "muster run: cannot execute " << argv[0] << ": " << std::strerror(err) << "\n";
  std::_Exit(127);
}

}  // namespace

bool settle_slurm_world(RunOptions& o, const std::string& endpoint) {
  const SlurmWorld& w = *o.slurm_world;
  bool node_daemon = daemon_answers(endpoint);
  if (!node_daemon && !o.coordinator_given && !o.coordinator.empty())
    o.coordinator = w.hosts.front() + ":" + std::to_string(w.coordinator_port);
  std::ostringstream line;
  line << "muster run: the world from Slurm: job " << o.job_id;
  if (o.slurm_task)
    line << ", rank " << w.rank << " of " << w.world_size << " (local " << w.local_rank << " of "
         << w.local_world_size << ")";
  line << ", node " << w.node_rank << " of " << w.num_nodes;
  if (!w.node_name.empty()) line << " (" << w.node_name << ")";
  if (!o.coordinator.empty())
    line << ", coordinator " << o.coordinator
         << (node_daemon ? " (the nodes' musterd)" : " (embedded daemons)");
  if (w.step_gpus) line << ", " << w.step_gpus->size() << " GPU(s) of the step";
  std::cerr << line.str() << "\n";
  return node_daemon;
}

int slurm_task_main(const RunOptions& o, const std::string& endpoint, bool node_daemon) {
  if (!node_daemon) {
    std::cerr << "muster run: --slurm-task needs this node's musterd, and none answers at "
              << endpoint << " (the node's tasks would each start an embedded daemon); "
              << "run musterd on every node, or one task per node: srun --ntasks-per-node=1 "
                 "muster run --nproc-per-node N PROGRAM\n";
    return 1;
  }
  const SlurmWorld& w = *o.slurm_world;
  try {
    std::optional<std::vector<int64_t>> visible;
    if (!o.cpu) visible = visible_gpus(endpoint);
    // The generation comes with the rank (lead_node, wait_for_rank).
    muster::World at{.node_rank = w.node_rank,
                     .num_nodes = w.num_nodes,
                     .rank_offset = w.rank - w.local_rank,
                     .world_size = w.world_size,
                     .master_addr = w.hosts.front(),
                     .master_port = o.master_port ? o.master_port : w.master_port};
    auto booked = w.local_rank == 0 ? lead_node(o, endpoint, at, allowed_devices(o, visible))
                                    : wait_for_rank(o, endpoint, at);
    int device = booked.devices.at(w.local_rank);
    if (visible && device >= 0 && visible_ordinal(*visible, device) < 0)
      throw std::runtime_error("GPU " + std::to_string(device) + ", leased to local rank " +
                               std::to_string(w.local_rank) +
                               ", is not visible to this task (CUDA_VISIBLE_DEVICES): run srun "
                               "with --gpu-bind=none so that each task sees the step's GPUs");
    auto vars = worker_vars(o, endpoint, o.job_id, at, booked, w.local_rank, 0, "", visible);
    vars.erase("TORCHELASTIC_ERROR_FILE");  // no launcher stays to read it
    exec_program(worker_argv(o, w.local_rank), worker_env(vars));
  } catch (const std::exception& e) {
    std::cerr << "muster run: " << e.what() << "\n";
    return 1;
  }
}

std::optional<int> run_under_slurm(RunOptions& o, const std::string& endpoint) {
  if (!o.slurm_world) return std::nullopt;
  bool node_daemon = false;
  try {
    node_daemon = settle_slurm_world(o, endpoint);
  } catch (const std::exception& e) {
    std::cerr << "muster run: " << e.what() << "\n";
    return 1;
  }
  if (o.slurm_task) return slurm_task_main(o, endpoint, node_daemon);
  return std::nullopt;
}

}  // namespace muster::cli
