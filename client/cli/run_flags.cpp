#include "cli/run_flags.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "log.hpp"
#include "split.hpp"

namespace muster::cli {

int64_t int_value(const std::string& s) {
  char* end = nullptr;
  errno = 0;
  long long v = s.empty() ? 0 : std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end || errno) throw FlagError("invalid int value: '" + s + "'");
  return v;
}

double float_value(const std::string& s) {
  char* end = nullptr;
  double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
  if (s.empty() || *end) throw FlagError("invalid float value: '" + s + "'");
  return v;
}

namespace {

// "N" or "MIN:MAX", as torchrun's --nnodes.
void parse_nnodes(const std::string& s, uint32_t& min_nodes, uint32_t& max_nodes) {
  auto colon = s.find(':');
  auto number = [&](const std::string& t) {
    if (t.empty() || t.size() > 5 || t.find_first_not_of("0123456789") != std::string::npos)
      throw std::runtime_error("--nnodes takes N or MIN:MAX, got '" + s + "'");
    return static_cast<uint32_t>(std::stoul(t));
  };
  min_nodes = number(s.substr(0, colon));
  max_nodes = colon == std::string::npos ? min_nodes : number(s.substr(colon + 1));
  if (min_nodes < 1 || max_nodes < min_nodes || max_nodes > 65536)
    throw std::runtime_error("--nnodes: need 1 <= MIN <= MAX <= 65536, got '" + s + "'");
}

int64_t bounded(const std::string& s, int64_t lo, int64_t hi) {
  int64_t v = int_value(s);
  if (v < lo || v > hi)
    throw FlagError("must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return v;
}

// A setter that stores the value as given.
auto text(std::string& to) {
  return [&to](const std::string& v) { to = v; };
}
auto on(bool& to) {
  return [&to](const std::string& v) { to = switch_value(v); };
}
// A --no-X switch: given, `to` is false.
auto off(bool& to) {
  return [&to](const std::string& v) { to = !switch_value(v); };
}
auto seconds(double& to) {
  return [&to](const std::string& v) { to = float_value(v); };
}
// --signals-to-handle (newer torchrun; default SIGTERM,SIGINT,SIGHUP,SIGQUIT):
// muster run handles SIGTERM, SIGINT and SIGHUP (SIGQUIT ends it, and the
// workers with it); a list naming another signal would promise what it
// does not do.
void signals_to_handle(const std::string& v) {
  for (const auto& sig : split(v))
    if (sig != "SIGTERM" && sig != "SIGINT" && sig != "SIGHUP" && sig != "SIGQUIT")
      throw FlagError(
          "muster run handles SIGTERM, SIGINT and SIGHUP (stopping the workers), "
          "and SIGQUIT ends it with them; it cannot handle '" +
          sig + "'");
}

// A flag muster does not have, refused with why and what to use instead.
// --log-level and -v: MUSTER_LOG_LEVEL, which the embedded daemon reads when
// this run forks it.
void log_level(const std::string& v) {
  log::Level level;
  if (!log::parse_level(v, level))
    throw FlagError("invalid choice '" + v +
                    "' (choose from 'error', 'warning', 'notice', "
                    "'info', 'debug')");
  ::setenv("MUSTER_LOG_LEVEL", v.c_str(), 1);
}

auto refused(const std::string& why) {
  return [why](const std::string&) -> void { throw FlagError(why); };
}

std::vector<Flag> torchrun_flags(RunOptions& o, RawOptions& raw) {
  // clang-format off
  return {
    {"help", 'h', "", "print this help and exit", on(raw.help)},
    {"nnodes", 0, "N|MIN:MAX", "number of nodes, or MIN:MAX (elastic); more than 1 needs "
       "--rdzv-endpoint and --rdzv-id",
       [&o, &raw](const std::string& v) {
         parse_nnodes(v, o.min_nodes, o.max_nodes);
         raw.nnodes = v;
       }},
    {"nproc-per-node", 'n', "N", "workers (ranks) on this node: a number, gpu (one per GPU "
       "the job may lease), cpu (one per CPU, no GPU) or auto (gpu if there are GPUs, else cpu)",
       text(o.nproc_spec)},
    {"rdzv-backend", 0, "NAME", "c10d (the default: nodes meet at the coordinating musterd) or "
       "static (the same, --node-rank fixing the order); etcd is refused", text(o.rdzv_backend)},
    {"rdzv-endpoint", 0, "HOST[:PORT]", "the musterd that coordinates a multi-node job (its "
       "--peer-port, default 29400); every node gives the same", text(o.coordinator),
       {"coordinator"}},
    {"rdzv-id", 0, "ID", "job id (TORCHELASTIC_RUN_ID); default: generated", text(o.job_id),
       {"job-id"}},
    {"rdzv-conf", 0, "K=V,...", "join_timeout (or timeout) sets --rdzv-timeout, "
       "last_call_timeout sets --last-call; torch's other keys are accepted and ignored",
       text(raw.rdzv_conf)},
    {"standalone", 0, "", "one node alone: the job meets on this node's daemon, no "
       "--rdzv-* needed (those given are ignored, as torchrun does)", on(o.standalone)},
    {"max-restarts", 0, "K", "restart the whole group up to K times after a worker fails "
       "(TORCHELASTIC_RESTART_COUNT)",
       [&o](const std::string& v) { o.max_restarts = static_cast<uint32_t>(bounded(v, 0, 1000)); }},
    {"monitor-interval", 0, "SECONDS", "accepted for torchrun's command lines; muster hears "
       "of a worker's exit at once instead of polling", seconds(o.monitor_interval_s)},
    {"start-method", 0, "METHOD", "spawn, fork or forkserver: accepted; muster always starts "
       "each worker as a new process (fork and exec, like spawn)", text(o.start_method)},
    {"role", 0, "ROLE", "the workers' role (ROLE_NAME); default: default", text(o.role)},
    {"module", 'm', "", "run PROGRAM as a Python module: $MUSTER_PYTHON -u -m PROGRAM",
       on(o.module)},
    {"no-python", 0, "", "run PROGRAM directly even if it ends in .py", on(o.no_python)},
    {"run-path", 0, "", "run PROGRAM with $MUSTER_PYTHON -u whatever its name (torchrun runs "
       "it with runpy.run_path); takes precedence over --no-python", on(o.run_path)},
    {"log-dir", 0, "DIR", "write workers' output and error files under DIR as torchrun lays "
       "them out", text(o.log_dir)},
    {"redirects", 'r', "SPEC", "send workers' streams only to files in --log-dir: 0 none, 1 "
       "stdout, 2 stderr, 3 both, or LOCAL_RANK:N,... per rank", text(o.redirects)},
    {"tee", 't', "SPEC", "copy workers' streams to files in --log-dir as well as to the "
       "console (SPEC as --redirects)", text(o.tee)},
    {"node-rank", 0, "RANK", "this node's rank when a fixed order is wanted (default: "
       "assigned, stable)",
       [&o](const std::string& v) { o.node_rank = static_cast<int>(bounded(v, -1, 65535)); }},
    {"master-addr", 0, "ADDR", "MASTER_ADDR on one node (default 127.0.0.1); on node 0 of a "
       "multi-node job, this node's address for the others", text(o.master_addr)},
    {"master-port", 0, "PORT", "MASTER_PORT for workers (default: a free port)",
       [&o](const std::string& v) { o.master_port = static_cast<int>(bounded(v, 0, 65535)); }},
    {"local-addr", 0, "ADDR", "this node's address for MASTER_ADDR when it becomes node 0 "
       "(default: the host name)", text(o.local_addr)},
    {"use-env", 0, "", "muster launch: do not pass --local_rank=N (workers read LOCAL_RANK); "
       "muster run: accepted, it never passes it", on(o.use_env)},
    {"numa-binding", 0, "MODE", "pin each worker to the CPUs near its GPU and prefer that "
       "GPU's NUMA node for memory: node (the default with GPUs), socket (its whole socket) or "
       "none (the default for CPU jobs); widened when more ranks would share CPUs than they "
       "have", text(o.numa_binding)},
    {"local-ranks-filter", 0, "RANKS", "refused (newer torchrun)", refused(
       "muster shows every rank's output, each line prefixed [rankN]: -- keep some ranks' "
       "lines by that prefix (grep '^\\[rank0\\]'), or write each rank's to files with "
       "--log-dir and --redirects")},
    {"virtual-local-rank", 0, "", "refused (newer torchrun)", refused(
       "--virtual-local-rank gives every worker LOCAL_RANK 0 and one visible GPU; muster "
       "gives each worker its own GPU lease (MUSTER_DEVICE, CUDA_DEVICE_ORDER=PCI_BUS_ID) and "
       "torchrun 1.13's LOCAL_RANK, with every GPU visible for CUDA IPC")},
    {"signals-to-handle", 0, "SIGNALS", "accepted (newer torchrun) when SIGNALS are among "
       "SIGTERM,SIGINT,SIGHUP,SIGQUIT: muster run stops the workers on SIGTERM, SIGINT and "
       "SIGHUP, and they die with it on any other", signals_to_handle},
    {"event-log-handler", 0, "NAME", "refused (newer torchrun)", refused(
       "--event-log-handler picks a torch events plugin, which muster cannot load; muster "
       "run's own lines are on its stderr, and the job's state in muster status")},
    {"logs-specs", 0, "NAME", "refused (newer torchrun)", refused(
       "--logs-specs picks a torch LogsSpecs plugin, which muster cannot load; use --log-dir "
       "with --redirects/--tee for torchrun's default layout")},
  };
  // clang-format on
}

// Help for a duration flag, with its default from RunOptions' initializer
// so that --help cannot drift from what the launcher does.
std::string with_default(const std::string& help, double RunOptions::*field) {
  char v[32];
  std::snprintf(v, sizeof v, "%g", RunOptions{}.*field);
  return help + " (default " + v + ")";
}

// Help for a flag that only a run starting its own embedded daemon uses.
std::string embedded(const std::string& help) {
  return "if this run starts its own embedded daemon" + help;
}

std::vector<Flag> muster_flags(RunOptions& o, RawOptions& raw) {
  // clang-format off
  return {
    {"owner", 0, "USER|UID", "root only: the job is this user's (each user's job ids are "
       "their own): the launcher books and meets in that user's job, and its workers join it",
       text(o.owner)},
    {"devices", 0, "LIST", "GPUs this job may lease, e.g. 0,1,4,6: NVML indices, or positions in "
     "CUDA_VISIBLE_DEVICES when that is set",
       text(raw.devices)},
    {"cpu", 0, "", "lease no GPU even when the daemon has some", on(o.cpu)},
    {"grace-period", 0, "SECONDS", with_default("seconds between SIGTERM and SIGKILL when "
       "stopping workers", &RunOptions::grace_s), seconds(o.grace_s)},
    {"wait-for-gpus", 0, "SECONDS", "when the GPUs the job needs are leased to other jobs, "
       "wait up to SECONDS for them, saying every 10 s who holds them (default 0: fail at once, "
       "as torchrun does)",
       [&o](const std::string& v) {
         o.wait_gpus_s = float_value(v);
         if (o.wait_gpus_s < 0 || o.wait_gpus_s > 7 * 24 * 3600)
           throw FlagError("must be between 0 and 604800 seconds");
       }},
    {"no-prefix-output", 0, "", "pass workers' output through as is, without the `[rankN]: ` "
       "line prefix", on(raw.no_prefix)},
    {"no-store-relay", 0, "", "give every worker MASTER_PORT itself: no relay for rank 0's "
       "store (by default rank 0 binds MASTER_PORT and the other ranks of its node get the port "
       "of a relay that listens from the start and joins them to rank 0's store, so none waits "
       "out torch's 1 s retry)",
       off(o.store_relay)},
    {"last-call", 0, "SECONDS", with_default("seconds to wait for more nodes once MIN have "
       "joined, with an elastic --nnodes", &RunOptions::last_call_s), seconds(o.last_call_s)},
    {"rdzv-timeout", 0, "SECONDS", with_default("seconds to wait for the world to form before "
       "giving up", &RunOptions::rdzv_timeout_s), seconds(o.rdzv_timeout_s)},
    {"join-via", 0, "HOST:PORT", "send this node's join to the musterd there (another node's "
       "--peer-port, a relay) which passes it on with other nodes' joins in one message; if it "
       "cannot, the join goes to the coordinator", text(o.join_via)},
    {"simulate-gpus", 0, "N", embedded(", pretend N GPUs exist (demos, tests)"),
       [&o](const std::string& v) { o.simulate_gpus = static_cast<int>(bounded(v, -1, 1024)); }},
    {"peer-key-file", 0, "FILE", embedded(" for a multi-node job: its CURVE key pair (from "
       "`muster keygen`)"), text(o.peer_key_file)},
    {"peer-authorized-keys", 0, "FILE", "with --peer-key-file: public keys of the other nodes' "
       "daemons, if they differ", text(o.peer_authorized_keys)},
    {"peer-plain", 0, "", embedded(" for a multi-node job: peer over plain TCP (a trusted "
       "network only)"), on(o.peer_plain)},
    {"slurm", 0, "MODE", "auto (the default), on or off: take the world from Slurm's variables "
       "as a task of srun (nodes SLURM_STEP_NUM_NODES, node rank SLURM_NODEID, job id "
       "SLURM_JOB_ID.SLURM_STEP_ID, the coordinator on the first host of SLURM_STEP_NODELIST, "
       "only the step's GPUs); auto does so in a step unless --nnodes, --node-rank, "
       "--rdzv-endpoint or --standalone is given, on insists (with --rdzv-endpoint naming the "
       "coordinator)", text(o.slurm)},
    {"slurm-task", 0, "", "each task of the srun step is one rank (srun --ntasks-per-node=GPUS): "
       "no workers are started, PROGRAM runs in the task's place with RANK=SLURM_PROCID, "
       "LOCAL_RANK=SLURM_LOCALID, WORLD_SIZE=SLURM_NTASKS and the GPU of its local rank; needs "
              "the node's musterd", on(o.slurm_task)},
    {"log-level", 0, "LEVEL", "what an embedded daemon this run starts says on stderr: error "
       "(the default), warning, notice, info or debug; the same as MUSTER_LOG_LEVEL",
       log_level},
    {"verbose", 'v', "", "--log-level info: say why an embedded daemon could not start, and "
       "what it does",
       [](const std::string& v) { if (switch_value(v)) log_level("info"); }},
  };
  // clang-format on
}

}  // namespace

std::vector<Flag> run_flags(RunOptions& o, RawOptions& raw) {
  auto flags = torchrun_flags(o, raw);
  auto more = muster_flags(o, raw);
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

}  // namespace muster::cli
