// `muster run`: torchrun's job on one node, with the daemon keeping the books.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>

#include "cli/commands.hpp"
#include "cli/daemon_probe.hpp"

#include "cli/embedded.hpp"
#include "cli/numa.hpp"
#include "cli/output_pump.hpp"
#include "cli/posix_io.hpp"
#include "cli/rendezvous_wait.hpp"
#include "cli/reserve.hpp"
#include "cli/run_dirs.hpp"
#include "cli/run_gpus.hpp"
#include "cli/run_options.hpp"
#include "cli/slurm_task.hpp"
#include "cli/spawn.hpp"
#include "cli/store_relay.hpp"
#include "cli/summary.hpp"
#include "cli/supervisor.hpp"
#include "cli/worker_argv.hpp"
#include "cli/worker_vars.hpp"
#include "device_list.hpp"
#include "endpoint.hpp"
#include "job_id.hpp"
#include "muster/client.hpp"
#include "muster/launcher.hpp"
#include "protocol/limits.hpp"

namespace muster::cli {

namespace {

// The address other nodes reach this one at, when --local-addr is not given.
std::string host_or_loopback() {
  auto host = host_name();
  return host.empty() ? "127.0.0.1" : host;
}

// The world this node's workers are in: this node alone, or the one the
// coordinator formed.
muster::World place(const std::string& endpoint, const RunOptions& o, const std::string& job,
                    const muster::Reservation& booked, int port) {
  muster::World p;
  p.master_addr = o.master_addr;
  p.world_size = o.nproc;
  p.master_port = port;
  p.generation = booked.generation;
  if (o.coordinator.empty()) return p;
  muster::RendezvousOptions r;
  r.coordinator = o.coordinator;
  r.via = o.join_via;
  r.node_rank = o.node_rank;
  r.min_nodes = o.min_nodes;
  r.max_nodes = o.max_nodes;
  r.last_call = std::chrono::milliseconds(static_cast<int64_t>(o.last_call_s * 1000));
  r.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.rdzv_timeout_s * 1000));
  r.master_addr = o.local_addr.empty() ? host_or_loopback() : o.local_addr;
  r.master_port = port;
  auto w = wait_for_world(endpoint, job, r, o.launch_style ? "muster launch" : "muster run");
  std::cerr << "muster run: job " << job << " generation " << w.generation << ": node "
            << w.node_rank << " of " << w.num_nodes << ", ranks " << w.rank_offset << ".."
            << w.rank_offset + o.nproc - 1 << " of " << w.world_size << "\n";
  return w;
}

// The job this run books: --rdzv-id, else 96 random bits (a name nobody can
// guess before the job exists). Root in another user's job (--owner)
// speaks of it by its key (common/job_id.hpp), which the daemon takes from
// root only and only once the job exists; the reserve says the owner in its
// own field (muster::reserve).
std::string job_for(const RunOptions& o) {
  std::string job = o.job_id.empty() ? random_job_id() : o.job_id;
  return o.owner_uid >= 0 ? job_key(o.owner_uid, job) : job;
}

// The embedded daemon's peering, should this run start one.
EmbeddedPeering peering_for(const RunOptions& o) {
  EmbeddedPeering peering{o.peer_plain, o.peer_key_file, o.peer_authorized_keys, "", 0};
  // Hosting needs peering settings; without them the rendezvous says so.
  // Under Slurm the first node's daemon hosts, none other, even where
  // several nodes share a machine.
  bool may_host = !o.slurm_world || o.slurm_world->node_rank == 0;
  if (may_host && !o.coordinator.empty() && (o.peer_plain || !o.peer_key_file.empty())) {
    auto colon = o.coordinator.rfind(':');
    std::string host = o.coordinator.substr(0, colon);
    int port = std::atoi(o.coordinator.c_str() + colon + 1);
    peering.listen_host = coordinator_address_to_host(host, port);
    peering.listen_port = port;
  }
  return peering;
}

// --nproc-per-node gpu, cpu or auto: the number the daemon's GPUs (those
// --devices and CUDA_VISIBLE_DEVICES allow) or this machine's CPUs give.
void resolve_nproc(const std::string& endpoint, RunOptions& o) {
  if (o.nproc_spec != "gpu" && o.nproc_spec != "auto" && o.nproc_spec != "cpu") return;
  size_t gpus = 0;
  if (o.nproc_spec != "cpu" && !o.cpu) {
    ensure_daemon(endpoint, o.simulate_gpus, peering_for(o));
    size_t devices = Client({endpoint}).status().devices.size();
    // --devices, CUDA_VISIBLE_DEVICES and Slurm's step narrow them down.
    auto allowed = devices ? allowed_devices(o, visible_gpus(endpoint)) : std::vector<int>{};
    gpus = allowed.empty() ? devices : allowed.size();
  }
  if (o.nproc_spec == "gpu" && gpus == 0)
    throw std::runtime_error("--nproc-per-node gpu: no GPU to lease (the daemon has none" +
                             std::string(o.cpu ? ", or --cpu" : "") + ")");
  if (gpus == 0) o.cpu = true;  // cpu, or auto on a machine without GPUs
  unsigned cpus = std::thread::hardware_concurrency();
  o.nproc = static_cast<uint32_t>(gpus ? gpus : std::clamp(cpus, 1u, 4096u));
  std::cerr << "muster: --nproc-per-node " << o.nproc_spec << ": " << o.nproc << " workers\n";
}

// The job's check for supervise(): why the group must stop, or "". A GPU
// the job holds failed (device_failed: the sentence names it and its local
// rank) ends the group as a failed rank would; for a multi-node job, so
// does its world breaking. Nodes waiting to join set membership_change: a
// new generation, not a failure. One connection for the group's life.
std::function<std::string()> world_check(const std::string& endpoint, const std::string& job,
                                         bool multi_node, bool& membership_change) {
  auto launcher = std::make_shared<std::optional<Client>>();
  return [&endpoint, &job, multi_node, &membership_change, launcher]() -> std::string {
    try {
      // A single-node job's daemon may restart under it (its ranks carry
      // on): the check must not hold up the supervisor meanwhile.
      ClientOptions co{endpoint};
      if (!multi_node) co.request_timeout = co.wait_timeout = std::chrono::milliseconds(1000);
      if (!*launcher) launcher->emplace(co);
      auto s = muster::cluster_state(**launcher, job);
      if (s.state == "device_failed") return s.message;
      if (s.state == "broken") return "the job's world broke (" + s.message + ")";
      if (s.state == "waiting") {
        membership_change = true;
        return s.message + "; moving to the next generation";
      }
      return "";
    } catch (const Error& e) {
      launcher->reset();
      // Once every worker ended, the daemon forgot the job: nothing to say.
      // Nor while a single-node job's daemon restarts.
      if (e.code() == ErrorCode::kUnknownJob || !multi_node) return "";
      return std::string("lost the node's daemon (") + e.what() + ")";
    }
  };
}

// The MASTER_PORT of this node's workers other than rank 0. Rank 0 gets
// MASTER_PORT itself and binds it, as under torchrun, so a program that
// binds the port it was given (init_method=tcp://HOST:PORT of
// --master-port) can. Where rank 0 is one of this node's workers, the
// others get a relay's port instead: it listens from before any worker
// starts and joins each connection to rank 0's store as soon as rank 0
// listens (cli/store_relay.hpp), so none waits out torch's retry. The
// relay lasts the run, across restarts, and ends when rank 0 moves to
// another node. Without one (--no-store-relay, or no port for it) and on
// other nodes every worker gets MASTER_PORT itself.
int others_store_port(const RunOptions& o, const muster::World& at, int port,
                      std::optional<StoreRelay>& relay) {
  if (!o.store_relay || at.rank_offset != 0 || at.master_port != port) {
    relay.reset();
    return at.master_port;
  }
  if (relay) {
    relay->drop_waiting();  // the last attempt's workers' connections
    return relay->port();
  }
  // The relay's own port is any free one; the kernel may offer MASTER_PORT
  // itself while rank 0 does not hold it yet, which the relay refuses.
  for (int tries = 0; tries < 3 && !relay; ++tries) {
    try {
      raise_fd_limit();  // two fds a connection
      relay.emplace(0, port);
    } catch (const std::system_error&) {
    }
  }
  return relay ? relay->port() : port;
}

// One attempt's group: reserves, places, starts the workers held, tells the
// daemon their pids, releases and supervises them.
struct Group {
  std::vector<Worker> workers;
  OutputPump pump;
  bool membership_change = false;
  uint32_t rank_offset = 0;
  std::vector<std::string> error_files;  // per local rank

  explicit Group(const RunOptions& o) : pump(o.prefix_output, 5) {}

  Outcome run(const std::string& endpoint, const RunOptions& o, const std::string& job,
              uint32_t attempt, uint32_t restarts, int port, const RunDirs& dirs,
              std::optional<StoreRelay>& relay) {
    std::optional<std::vector<int64_t>> visible;
    if (!o.cpu) {
      ensure_daemon(endpoint, o.simulate_gpus, peering_for(o));
      visible = visible_gpus(endpoint);
    }
    auto booked = reserve_slots(endpoint, o, peering_for(o), job, attempt, restarts,
                                allowed_devices(o, visible));
    muster::World at = place(endpoint, o, job, booked, port);
    rank_offset = at.rank_offset;
    int others_port = others_store_port(o, at, port, relay);
    auto numa = numa_plan(endpoint, o.numa_binding, booked.devices, at.rank_offset);
    for (uint32_t r = 0; r < o.nproc; ++r) {
      error_files.push_back(dirs.error_file(attempt, r));
      auto vars =
          worker_vars(o, endpoint, job, at, booked, r, restarts, error_files.back(), visible);
      if (at.rank_offset + r != 0) vars["MASTER_PORT"] = std::to_string(others_port);
      workers.push_back(
          spawn_held(r, worker_argv(o, r), worker_env(vars), true, pin_masks(numa.ranks.at(r))));
      pump.add(workers.back(), stream_routes(o.redirects, o.tee, r, dirs.rank_dir(attempt, r)));
    }
    std::vector<int64_t> pids;
    for (const auto& w : workers) pids.push_back(w.pid);
    Client launcher({endpoint});
    muster::attach(launcher, job, pids, numa.applied());
    pump.start();
    for (auto& w : workers) release(w);
    return supervise(workers, o.grace_s,
                     world_check(endpoint, job, !o.coordinator.empty(), membership_change));
  }
};

// An embedded daemon left without jobs stops; wait a moment for it.
void wait_for_children() {
  int status;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < until) {
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p < 0) break;  // ECHILD: nobody left
    if (p == 0) usleep(10000);
  }
}

// No more workers: the embedded daemon this run started stops as soon as
// it is idle, and muster run waits for it (nothing it started outlives it).
void end_of_run(const std::string& endpoint, const std::string& job) {
  release_embedded_daemon(endpoint, job);
  wait_for_children();
}

// The run's log directories; false (said on stderr) when they cannot be made.
bool make_dirs(std::optional<RunDirs>& dirs, const RunOptions& o, const std::string& job,
               const char* name) {
  try {
    // Logs asked for without --log-dir stay in the temporary directory.
    dirs.emplace(o.log_dir, job, !o.redirects.empty() || !o.tee.empty());
    return true;
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return false;
  }
}

}  // namespace

namespace {

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

// The node's musterd that this user may not use (not in the muster group):
// a CPU job runs on a musterd of the user's own instead, one that leases
// no GPU (so never one the node's daemon manages); a GPU job cannot. False
// after saying why nothing can run.
bool reachable_endpoint(std::string& endpoint, RunOptions& o, const char* name) {
  auto p = probe_daemon(endpoint);
  if (p.reach != Reach::kDenied) return true;
  const bool defaulted = !env_set("MUSTER_ENDPOINT") && !env_set("MUSTER_RUNTIME_DIR");
  const bool cpu_job = o.cpu || o.nproc_spec == "cpu";
  const std::string own = default_runtime_dir();
  if (defaulted && cpu_job && ipc_dir_of(endpoint) != own) {
    endpoint = endpoint_for_dir(own);
    o.simulate_gpus = 0;
    std::cerr << name << ": " << p.sentence << " This CPU job runs on a musterd of your own in "
              << own << ".\n";
    return true;
  }
  std::cerr << name << ": " << p.sentence
            << (defaulted && !cpu_job ? " A GPU job needs the node's musterd, which leases its "
                                        "GPUs; a CPU job (--cpu) can run without it."
                                      : "")
            << "\n";
  return false;
}

// The mistakes found before anything starts, each with its sentence: the
// exit code, or 0 to go on (endpoint possibly moved to the user's own).
int before_start(RunOptions& o, std::string& endpoint, const char* name) {
  if (auto why = program_problem(o); !why.empty()) {
    std::cerr << name << ": " << why << "\n";
    return 2;
  }
  if (!reachable_endpoint(endpoint, o, name)) return 1;
  // A multi-node job on a daemon this run embeds (no node daemon here)
  // needs peering settings on this command line; say which before starting.
  if (!o.coordinator.empty() && !o.peer_plain && o.peer_key_file.empty() &&
      probe_daemon(endpoint).reach != Reach::kOk) {
    std::cerr << name
              << ": a multi-node job without a musterd on this node needs peering keys for the "
                 "daemon muster run starts: run 'muster keygen --out FILE' once, copy FILE to "
                 "every node, and add --peer-key-file FILE here (or --peer-plain on a trusted "
                 "network)\n";
    return 2;
  }
  return 0;
}

int launcher_main(const std::vector<std::string>& args, bool launch_style) {
  const char* name = launch_style ? "muster launch" : "muster run";
  std::optional<RunOptions> parsed;
  try {
    parsed = parse_run_options(args, launch_style);
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << "\nTry '" << name << " --help'.\n";
    return 2;
  }
  if (!parsed) return 0;
  std::string endpoint = resolve_endpoint();
  if (int code = before_start(*parsed, endpoint, name)) return code;
  if (auto done = run_under_slurm(*parsed, endpoint)) return *done;
  block_supervisor_signals();
  try {
    resolve_nproc(endpoint, *parsed);
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 1;
  }
  const RunOptions& o = *parsed;
  std::string job = job_for(o);
  int port = o.master_port ? o.master_port : free_port();
  std::optional<RunDirs> dirs;
  if (!make_dirs(dirs, o, job, name)) return 1;
  if (dirs->kept()) std::cerr << name << ": log directory " << dirs->base() << "\n";
  std::vector<Failure> failures;
  int code = 1;
  // Restarts after failures (counted against --max-restarts); a new world
  // because nodes joined is not one.
  uint32_t restarts = 0;
  // Whether another attempt may start: says so, or prints the summary.
  auto may_restart = [&](const char* with) {
    if (restarts >= o.max_restarts) {
      print_summary(name, failures, o, dirs->kept());
      return false;
    }
    ++restarts;
    std::cerr << "muster run: restarting the group" << with << " (restart " << restarts << " of "
              << o.max_restarts << ")\n";
    return true;
  };
  std::optional<StoreRelay> relay;  // outlives the attempts' groups
  for (uint32_t attempt = 0;; ++attempt) {
    Group group(o);
    Outcome out;
    try {
      out = group.run(endpoint, o, job, attempt, restarts, port, *dirs, relay);
    } catch (const StoppedWaiting& e) {
      std::cerr << "muster run: " << e.what() << "\n";
      code = 128 + e.sig;
      break;
    } catch (const std::exception& e) {
      std::cerr << "muster run: " << e.what() << "\n";
      kill_all(group.workers, SIGKILL);
      group.pump.finish(1.0);
      code = 1;
      break;
    }
    // Everything the workers wrote is out before muster run says more.
    group.pump.finish(1.0);
    code = out.code;
    if (!out.world_changed.empty() && !out.interrupted) {
      if (group.membership_change) continue;  // same restart count, next generation
      failures.push_back({attempt, out, {}, group.rank_offset, {}, std::time(nullptr)});
      if (!may_restart(o.coordinator.empty() ? "" : " with the other nodes")) break;
      continue;
    }
    if (code == 0 || out.rank < 0) break;
    failures.push_back({attempt, out, group.pump.tail(static_cast<uint32_t>(out.rank)),
                        group.rank_offset, group.error_files, std::time(nullptr)});
    if (int sig = take_pending_stop_signal(); sig || out.interrupted) {
      if (sig) code = 128 + sig;
      break;  // the user's stop is never retried
    }
    if (!may_restart("")) break;
  }
  end_of_run(endpoint, job);
  return code;
}

}  // namespace

int run_main(const std::vector<std::string>& args) {
  return launcher_main(args, false);
}

int launch_main(const std::vector<std::string>& args) {
  return launcher_main(args, true);
}

}  // namespace muster::cli
