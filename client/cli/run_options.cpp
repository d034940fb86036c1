#include "cli/run_options.hpp"

#include <iostream>

#include "cli/numa.hpp"
#include "cli/posix_io.hpp"
#include "cli/run_flags.hpp"
#include "cli/std_spec.hpp"
#include "device_list.hpp"
#include "job_id.hpp"
#include "peer/secure.hpp"
#include "split.hpp"

namespace muster::cli {

namespace {

// torchrun's --rdzv-conf K=V,...: the keys with a meaning here set muster's
// timeouts; torch's others are said to be ignored.
void apply_rdzv_conf(const std::string& conf, RunOptions& o) {
  for (const auto& kv : split(conf)) {
    if (kv.empty()) continue;
    auto eq = kv.find('=');
    if (eq == std::string::npos)
      throw std::runtime_error("--rdzv-conf takes KEY=VALUE,..., got '" + kv + "'");
    std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    try {
      if (key == "join_timeout" || key == "timeout")
        o.rdzv_timeout_s = float_value(value);
      else if (key == "last_call_timeout")
        o.last_call_s = float_value(value);
      else
        std::cerr << "muster: --rdzv-conf " << key << " has no meaning here; ignored\n";
    } catch (const FlagError& e) {
      throw std::runtime_error("--rdzv-conf " + key + ": " + e.what());
    }
  }
}

// A host name, an IPv4 address or a bracketed IPv6 one: not a URL, not
// words ("http://h:29400" would otherwise wait out the rendezvous timeout).
bool valid_host(const std::string& h) {
  if (h.size() > 2 && h.front() == '[' && h.back() == ']')
    return h.find_first_not_of("0123456789abcdefABCDEF:.%", 1) == h.size() - 1;
  return !h.empty() && h.size() <= 253 &&
         h.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") ==
             std::string::npos;
}

// Under srun, the world Slurm describes (cli/slurm_world.hpp): node count,
// node rank, job id and the first host's coordinator. Its port here is
// the node daemons' (29400); the launcher moves it to the derived port when
// it finds no node daemon (embedded daemons).
void apply_slurm(RunOptions& o, const RawOptions& raw, const EnvMap& env) {
  SlurmMode mode;
  try {
    mode = slurm_mode_from_string(o.slurm);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("--slurm: ") + e.what());
  }
  std::vector<std::string> explicit_world;
  for (const char* f : {"nnodes", "node-rank", "rdzv-endpoint", "standalone"})
    if (raw.given.count(f)) explicit_world.push_back(f);
  if (o.slurm_task) {
    if (mode == SlurmMode::kOff)
      throw std::runtime_error(
          "--slurm-task takes the ranks from Slurm; --slurm off contradicts it");
    if (raw.given.count("nproc-per-node"))
      throw std::runtime_error(
          "--slurm-task: each task is one rank (srun --ntasks-per-node sets how many); "
          "--nproc-per-node contradicts it");
    if (o.max_restarts > 0)
      throw std::runtime_error(
          "--slurm-task: a task is its rank and is not restarted; --max-restarts needs one "
          "task per node (srun --ntasks-per-node=1 muster run --nproc-per-node N)");
    mode = SlurmMode::kOn;
  }
  if (!use_slurm(mode, env, explicit_world)) return;
  const SlurmWorld& w = o.slurm_world.emplace(slurm_world(env, o.slurm_task));
  o.min_nodes = o.max_nodes = w.num_nodes;
  o.node_rank = static_cast<int>(w.node_rank);
  if (!raw.given.count("rdzv-id")) o.job_id = w.job_id;
  o.coordinator_given = raw.given.count("rdzv-endpoint") > 0;
  if (!o.coordinator_given) o.coordinator = w.hosts.front() + ":29400";
  // This node's name as Slurm knows it: how the others reach it.
  if (o.local_addr.empty()) o.local_addr = w.hosts.at(w.node_rank);
  if (o.slurm_task) {
    o.nproc = w.local_world_size;
    o.nproc_spec = std::to_string(o.nproc);
  }
}

// torchrun's rendezvous flags mapped onto muster's coordinator, job id and
// timeouts.
void apply_rendezvous(RunOptions& o, const RawOptions& raw) {
  if (o.rdzv_backend == "etcd" || o.rdzv_backend == "etcd-v2")
    throw std::runtime_error("--rdzv-backend " + o.rdzv_backend +
                             ": muster has no etcd rendezvous; its nodes meet at the "
                             "coordinating musterd: use c10d (the default) with --rdzv-endpoint "
                             "HOST:PORT of that daemon");
  if (o.rdzv_backend != "c10d" && o.rdzv_backend != "static")
    throw std::runtime_error("--rdzv-backend: invalid choice '" + o.rdzv_backend +
                             "' (choose from 'c10d', 'static')");
  apply_rdzv_conf(raw.rdzv_conf, o);
  if (o.standalone) {
    // As torchrun: a private rendezvous, explicit --rdzv-* ignored, the id
    // too (torchrun makes a new one), so two standalone runs never meet.
    if (o.max_nodes > 1)
      throw std::runtime_error("--standalone is one node alone; --nnodes " + raw.nnodes +
                               " contradicts it");
    o.coordinator.clear();
    o.job_id.clear();
  }
  if (o.max_nodes == 1) o.coordinator.clear();  // torchrun's endpoint on one node: unused
  if (!o.coordinator.empty()) {
    // HOST[:PORT], the port torchrun's default (and musterd's --peer-port).
    auto colon = o.coordinator.rfind(':');
    bool bracketed = !o.coordinator.empty() && o.coordinator.back() == ']';
    if (colon == std::string::npos || bracketed) o.coordinator += ":29400";
    colon = o.coordinator.rfind(':');
    std::string port = o.coordinator.substr(colon + 1);
    if (!valid_host(o.coordinator.substr(0, colon)) || port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
        std::stoi(port) > 65535)
      throw std::runtime_error("--rdzv-endpoint must be HOST:PORT, got '" + o.coordinator + "'");
  }
  if (!o.join_via.empty()) {
    auto colon = o.join_via.rfind(':');
    std::string port = colon == std::string::npos ? "" : o.join_via.substr(colon + 1);
    if (o.coordinator.empty() || !valid_host(o.join_via.substr(0, colon)) || port.empty() ||
        port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) < 1 || std::stoi(port) > 65535)
      throw std::runtime_error(
          "--join-via must be HOST:PORT of another node's musterd, with "
          "--rdzv-endpoint; got '" +
          o.join_via + "'");
  }
  // On node 0 of a multi-node job, --master-addr is this node's address.
  if (o.max_nodes > 1 && o.local_addr.empty() && o.node_rank == 0) o.local_addr = o.master_addr;
  if (o.max_nodes == 1 && o.master_addr.empty()) o.master_addr = "127.0.0.1";
}

void print_help(const FlagParser& flags, bool launch_style) {
  if (launch_style)
    std::cout << "Usage: muster launch [OPTIONS] PROGRAM [ARGS...]\n\n"
                 "`muster run` as torch.distributed.launch: each worker also gets\n"
                 "--local_rank=N on its command line (unless --use-env), after the script,\n"
                 "the -m MODULE or the -c COMMAND when PROGRAM is a Python interpreter, else\n"
                 "right after PROGRAM. Everything else is as below.\n\n";
  std::cout << "Usage: muster run [OPTIONS] PROGRAM [ARGS...]\n\n"
               "Starts N workers of PROGRAM on this node with torchrun's environment (RANK,\n"
               "LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,\n"
               "TORCHELASTIC_*) plus MUSTER_ENDPOINT, MUSTER_JOB_ID and MUSTER_DEVICE (the leased\n"
               "GPU, -1 for none) for libmuster, and nothing added to PROGRAM's arguments, as\n"
               "torchrun (`muster launch` adds --local_rank=N). Each\n"
               "rank leases its own GPU when the daemon has GPUs (never shared). Uses the node's\n"
               "musterd, or starts an embedded one if none answers; it serves until no job\n"
               "is left on it (yours or another launcher's that found it).\n"
               "A PROGRAM ending in .py runs with $MUSTER_PYTHON (default python3).\n"
               "If a worker fails, the others are stopped (SIGTERM, then SIGKILL after the\n"
               "grace period) and muster run exits with the failing worker's code; with\n"
               "--max-restarts K the group is started again, up to K times, with\n"
               "TORCHELASTIC_RESTART_COUNT and MUSTER_GENERATION counting the restarts, and\n"
               "after the last failure a summary names the failing rank of each attempt.\n"
               "Each line a worker writes goes to muster run's stdout or stderr as\n"
               "`[rankN]: LINE` (like torchrun's --tee), unless --no-prefix-output.\n"
               "Multi-node: run the same command on every node with --nnodes, --coordinator\n"
               "HOST:PORT and --job-id; the nodes' daemons form one world through the\n"
               "coordinating daemon (RANK = the ranks of the nodes before + LOCAL_RANK,\n"
               "GROUP_RANK = the node rank, MUSTER_GENERATION = the world's generation).\n"
               "With MIN:MAX the world forms when MAX nodes joined, or MIN and --last-call\n"
               "passed; a node that comes later waits, and the running nodes restart their\n"
               "workers into the next generation with it (not counted as a restart). When\n"
               "a node is lost or fails, every node stops its workers and, within\n"
               "--max-restarts, they form the next generation together. Without a node\n"
               "daemon, the embedded one peers with --peer-key-file or --peer-plain, and the\n"
               "node whose address is the coordinator's hosts it.\n"
               "Under Slurm (as a task of srun) the world comes from the step instead:\n"
               "srun --ntasks-per-node=1 muster run --nproc-per-node 8 train.py, or one task\n"
               "per rank with --slurm-task (see --slurm).\n\n"
               "PET_<FLAG> variables (PET_NPROC_PER_NODE=4, PET_STANDALONE=1) give defaults,\n"
               "as torchrun's; every flag takes _ for - (--nproc_per_node), and a unique\n"
               "prefix of a flag is the flag (--nproc 4).\n\n"
               "Options:\n"
            << flags.help();
}

// --nproc-per-node N, or gpu/cpu/auto resolved once the daemon answers.
void check_nproc(RunOptions& o) {
  const auto& s = o.nproc_spec;
  if (s == "gpu" || s == "cpu" || s == "auto") return;
  int64_t n = 0;
  try {
    n = int_value(s);
  } catch (const FlagError&) {
    throw std::runtime_error("--nproc-per-node takes a number, gpu, cpu or auto, got '" + s + "'");
  }
  if (n < 1 || n > 4096) throw std::runtime_error("--nproc-per-node must be between 1 and 4096");
  o.nproc = static_cast<uint32_t>(n);
}

// How PROGRAM runs, and the flags accepted only for torchrun's command lines.
void check_program(const RunOptions& o) {
  if (o.module && o.no_python && !o.run_path)
    throw std::runtime_error("--module and --no-python contradict each other");
  if (o.start_method != "spawn" && o.start_method != "fork" && o.start_method != "forkserver")
    throw std::runtime_error("--start-method: invalid choice '" + o.start_method +
                             "' (choose from 'spawn', 'fork', 'forkserver')");
  if (o.monitor_interval_s <= 0) throw std::runtime_error("--monitor-interval must be above 0");
  for (const auto& [flag, spec] : {std::pair{"--redirects", o.redirects}, {"--tee", o.tee}}) {
    try {
      std_streams(spec, 0);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string(flag) + ": " + e.what());
    }
  }
}

// Ranges and contradictions, said before anything starts.
void check(RunOptions& o, const RawOptions& raw, const EnvMap& env) {
  check_nproc(o);
  apply_slurm(o, raw, env);
  check_program(o);
  check_numa_binding(o.numa_binding);
  if (o.grace_s < 0 || o.grace_s > 3600)
    throw std::runtime_error("--grace-period must be between 0 and 3600 seconds");
  if (o.max_restarts > 1000) throw std::runtime_error("--max-restarts must be between 0 and 1000");
  o.prefix_output = !raw.no_prefix;
  if (o.master_port < 0 || o.master_port > 65535)
    throw std::runtime_error("--master-port must be between 0 and 65535");
  apply_rendezvous(o, raw);
  if (o.max_nodes > 1 && o.coordinator.empty())
    throw std::runtime_error("--nnodes " + raw.nnodes + " needs --rdzv-endpoint HOST:PORT");
  // The daemon holds a job id to the same charset (job_id.hpp); said now,
  // a usage error, before a daemon is asked or a worker starts.
  if (!o.job_id.empty())
    if (auto why = job_id_problem(o.job_id); !why.empty())
      throw std::runtime_error("--rdzv-id: " + why);
  if (!o.owner.empty()) {
    o.owner_uid = uid_of(o.owner);
    if (o.owner_uid < 0) throw std::runtime_error("--owner: no user '" + o.owner + "'");
    if (o.owner_uid == static_cast<int64_t>(::getuid()))
      o.owner_uid = -1;  // one's own
    else if (::getuid() != 0)
      throw std::runtime_error(
          "--owner: only root may run in another user's job (each user's "
          "job ids are their own: leave --owner out)");
    else if (o.job_id.empty())
      throw std::runtime_error("--owner needs --rdzv-id: the id of that user's job");
  }
  if (!o.coordinator.empty() && o.job_id.empty())
    throw std::runtime_error(
        "a multi-node job needs --rdzv-id (--job-id): every node must name "
        "the same job");
  if (o.node_rank >= static_cast<int>(o.max_nodes))
    throw std::runtime_error("--node-rank must be below the number of nodes (" +
                             std::to_string(o.max_nodes) + ")");
  if (o.node_rank < -1) throw std::runtime_error("--node-rank must not be negative");
  if (o.last_call_s < 0 || o.last_call_s > 86400)
    throw std::runtime_error("--last-call must be between 0 and 86400 seconds");
  if (o.peer_plain && !o.peer_key_file.empty())
    throw std::runtime_error("--peer-plain and --peer-key-file contradict each other");
  // Bad key files are the launcher's error, said now (the embedded daemon
  // that would read them is quiet).
  if (!o.peer_key_file.empty()) daemon::peer::read_key_file(o.peer_key_file);
  if (!o.peer_authorized_keys.empty()) daemon::peer::read_authorized_keys(o.peer_authorized_keys);
  if (o.rdzv_timeout_s <= 0 || o.rdzv_timeout_s > 86400)
    throw std::runtime_error("--rdzv-timeout must be between 0 and 86400 seconds");
  if (!raw.devices.empty()) {
    for (auto d : parse_device_list(raw.devices)) o.devices.push_back(static_cast<int>(d));
    if (o.cpu) throw std::runtime_error("--cpu and --devices contradict each other");
  }
}

}  // namespace

std::optional<RunOptions> parse_run_options(const std::vector<std::string>& args,
                                            bool launch_style) {
  RunOptions o;
  o.launch_style = launch_style;
  RawOptions raw;
  auto table = run_flags(o, raw);
  for (auto& f : table)  // remember which were given (--slurm auto needs to know)
    f.set = [&given = raw.given, name = f.name, set = f.set](const std::string& v) {
      given.insert(name);
      set(v);
    };
  FlagParser flags(std::move(table));
  auto env = environment();
  size_t i = 0;
  try {
    i = flags.parse(args, env);
  } catch (const FlagError& e) {
    throw std::runtime_error(e.what());
  }
  if (raw.help) {
    print_help(flags, launch_style);
    return std::nullopt;
  }
  if (i >= args.size()) throw std::runtime_error("no PROGRAM given");
  o.program = args[i];
  o.args.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  check(o, raw, env);
  return o;
}

}  // namespace muster::cli
