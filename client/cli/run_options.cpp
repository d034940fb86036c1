#include "cli/run_options.hpp"

#include <boost/program_options.hpp>
#include <iostream>
#include <set>

#include "device_list.hpp"
#include "peer/secure.hpp"

namespace po = boost::program_options;

namespace muster::cli {

namespace {
const std::set<std::string> kTakesValue = {"-n",
                                           "--nproc-per-node",
                                           "--nproc_per_node",
                                           "--devices",
                                           "--job-id",
                                           "--simulate-gpus",
                                           "--grace-period",
                                           "--master-port",
                                           "--master_port",
                                           "--max-restarts",
                                           "--max_restarts",
                                           "--nnodes",
                                           "--coordinator",
                                           "--rdzv-endpoint",
                                           "--rdzv_endpoint",
                                           "--node-rank",
                                           "--node_rank",
                                           "--last-call",
                                           "--rdzv-timeout",
                                           "--local-addr",
                                           "--local_addr",
                                           "--peer-key-file",
                                           "--peer-authorized-keys"};

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

// Option values converted and checked before they land in RunOptions.
struct RawOptions {
  std::string devices;
  std::string nnodes = "1";
  bool no_prefix = false;
};

// The options of the workers on this node and their restarts.
void add_local_options(po::options_description& desc, RunOptions& o, RawOptions& raw) {
  // clang-format off
  desc.add_options()
    ("help,h", "print this help and exit")
    ("nproc-per-node,n", po::value(&o.nproc)->default_value(1), "number of workers (ranks) on this node")
    ("nproc_per_node", po::value(&o.nproc), "alias of --nproc-per-node (torch.distributed.launch spelling)")
    ("devices", po::value(&raw.devices), "GPUs this job may lease, e.g. 0,1,4,6 (like CUDA_VISIBLE_DEVICES)")
    ("job-id", po::value(&o.job_id), "job id (TORCHELASTIC_RUN_ID); default: generated")
    ("use-env", po::bool_switch(&o.use_env), "muster launch: do not pass --local_rank=N (workers read LOCAL_RANK); muster run: accepted, it never passes it")
    ("cpu", po::bool_switch(&o.cpu), "lease no GPU even when the daemon has some")
    ("no-python", po::bool_switch(&o.no_python), "run PROGRAM directly even if it ends in .py")
    ("simulate-gpus", po::value(&o.simulate_gpus)->default_value(-1),
       "if this run starts its own embedded daemon, pretend N GPUs exist (demos, tests)")
    ("grace-period", po::value(&o.grace_s)->default_value(5.0),
       "seconds between SIGTERM and SIGKILL when stopping workers")
    ("master-port", po::value(&o.master_port)->default_value(0), "MASTER_PORT for workers (0: a free port)")
    ("master_port", po::value(&o.master_port), "alias of --master-port")
    ("max-restarts", po::value(&o.max_restarts)->default_value(0),
       "restart the whole group up to K times after a worker fails (TORCHELASTIC_RESTART_COUNT)")
    ("max_restarts", po::value(&o.max_restarts), "alias of --max-restarts (torchrun spelling)")
    ("no-prefix-output", po::bool_switch(&raw.no_prefix),
       "pass workers' output through as is, without the `[rankN]: ` line prefix");
  // clang-format on
}

// Multi-node jobs and an embedded daemon's peering.
void add_multinode_options(po::options_description& desc, RunOptions& o, RawOptions& raw) {
  // clang-format off
  desc.add_options()
    ("nnodes", po::value(&raw.nnodes)->default_value("1"),
       "number of nodes, N or MIN:MAX (elastic); more than 1 needs --coordinator")
    ("coordinator", po::value(&o.coordinator), "HOST:PORT of the daemon that coordinates a "
       "multi-node job (its --peer-bind/--peer-port); every node gives the same")
    ("rdzv-endpoint", po::value(&o.coordinator), "alias of --coordinator (torchrun spelling)")
    ("rdzv_endpoint", po::value(&o.coordinator), "alias of --coordinator")
    ("node-rank", po::value(&o.node_rank)->default_value(-1),
       "this node's rank when a fixed order is wanted (default: assigned, stable)")
    ("node_rank", po::value(&o.node_rank), "alias of --node-rank")
    ("last-call", po::value(&o.last_call_s)->default_value(30.0),
       "seconds to wait for more nodes once MIN have joined (elastic --nnodes)")
    ("rdzv-timeout", po::value(&o.rdzv_timeout_s)->default_value(600.0),
       "seconds to wait for the world to form before giving up")
    ("local-addr", po::value(&o.local_addr), "this node's address for MASTER_ADDR when it "
       "becomes node 0 (default: the host name)")
    ("local_addr", po::value(&o.local_addr), "alias of --local-addr")
    ("peer-key-file", po::value(&o.peer_key_file), "if this run starts its own embedded daemon "
       "for a multi-node job: its CURVE key pair (from `muster keygen`)")
    ("peer-authorized-keys", po::value(&o.peer_authorized_keys),
       "with --peer-key-file: public keys of the other nodes' daemons, if they differ")
    ("peer-plain", po::bool_switch(&o.peer_plain), "if this run starts its own embedded daemon "
       "for a multi-node job: peer over plain TCP (a trusted network only)");
  // clang-format on
}

void print_help(const po::options_description& desc, bool launch_style) {
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
               "node whose address is the coordinator's hosts it.\n\n"
            << desc;
}

// Splits args at the program: the first word that is not an option or its
// value. Returns the program's index (args.size() when none is given).
size_t split_at_program(const std::vector<std::string>& args, std::vector<std::string>& opts) {
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const auto& a = args[i];
    if (a == "--") return i + 1;
    if (a.empty() || a[0] != '-') break;
    opts.push_back(a);
    if (kTakesValue.count(a) && i + 1 < args.size()) opts.push_back(args[++i]);
  }
  return i;
}

// Ranges and contradictions, said before anything starts.
void check(RunOptions& o, const RawOptions& raw) {
  if (o.nproc < 1 || o.nproc > 4096)
    throw std::runtime_error("--nproc-per-node must be between 1 and 4096");
  if (o.grace_s < 0 || o.grace_s > 3600)
    throw std::runtime_error("--grace-period must be between 0 and 3600 seconds");
  if (o.max_restarts > 1000) throw std::runtime_error("--max-restarts must be between 0 and 1000");
  o.prefix_output = !raw.no_prefix;
  if (o.master_port < 0 || o.master_port > 65535)
    throw std::runtime_error("--master-port must be between 0 and 65535");
  parse_nnodes(raw.nnodes, o.min_nodes, o.max_nodes);
  if (o.max_nodes > 1 && o.coordinator.empty())
    throw std::runtime_error("--nnodes " + raw.nnodes + " needs --coordinator HOST:PORT");
  if (!o.coordinator.empty() && o.job_id.empty())
    throw std::runtime_error("a multi-node job needs --job-id: every node must name the same job");
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
  po::options_description desc("Options");
  add_local_options(desc, o, raw);
  add_multinode_options(desc, o, raw);
  std::vector<std::string> opts;
  size_t i = split_at_program(args, opts);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(opts).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw std::runtime_error(e.what());
  }
  if (vm.count("help")) {
    print_help(desc, launch_style);
    return std::nullopt;
  }
  if (i >= args.size()) throw std::runtime_error("no PROGRAM given");
  o.program = args[i];
  o.args.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  check(o, raw);
  return o;
}

}  // namespace muster::cli
