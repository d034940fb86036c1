#include "options.hpp"

#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>

#include "device_list.hpp"
#include "edit_distance.hpp"
#include "endpoint.hpp"
#include "gpu/libraries.hpp"
#include "log.hpp"
#include "metrics/address.hpp"
#include "muster_config.h"
#include "peer/secure.hpp"

namespace po = boost::program_options;

namespace muster::daemon {

namespace {

// Everything a setting can write; one instance for the real options, a
// scratch one to check each config file line on its own.
struct Settings {
  Options o;
  std::string devices;
  std::string socket_group;
  double peer_timeout = 10;
  double stuck_after = 60;
  std::string peer_key_file;
  std::string peer_authorized_keys;
};

// Longer than 80 lines because it is one table: every setting with its
// help, which the man pages and completions are generated from.
po::options_description settings_description(Settings& s) {
  po::options_description d("daemon settings (command line or config file)");
  // clang-format off
  d.add_options()
    ("runtime-dir", po::value(&s.o.config.runtime_dir)->value_name("DIR")->default_value(default_runtime_dir()),
       "directory for musterd.sock and musterd.lock (default: /run/muster for root, else "
       "$XDG_RUNTIME_DIR/muster, else /tmp/muster-$UID)")
    ("state-dir", po::value(&s.o.config.state_dir)->value_name("DIR"),
       "directory for state.msgpack, the jobs, leases and stores a restarted daemon takes "
       "over (default: the runtime directory)")
    ("devices", po::value(&s.devices)->value_name("LIST"), "GPU indices this daemon may hand out, e.g. 0,1,4,6 (default: all)")
    ("simulate-gpus", po::value(&s.o.config.simulate_gpus)->value_name("N")->default_value(-1),
       "pretend N GPUs exist instead of asking NVML/CUDA (tests, demos); -1 = off")
    ("socket-group", po::value(&s.socket_group)->value_name("NAME"),
       "give the socket to group NAME (mode 0660) so its members may use the daemon "
       "(default: the daemon's own group)")
    ("log-level", po::value(&s.o.log_level)->value_name("LEVEL")->default_value("info"),
       "error, warning, notice, info or debug")
    ("peer-bind", po::value(&s.o.config.peer_bind)->value_name("ADDR"),
       "listen for peer daemons (multi-node jobs) on this address, e.g. 0.0.0.0 or 10.0.0.7 "
       "(default: no listener; links to other nodes' daemons work either way)")
    ("peer-port", po::value(&s.o.config.peer_port)->value_name("N")->default_value(29400),
       "TCP port of the peer listener; 0 = any free port")
    ("peer-timeout", po::value(&s.peer_timeout)->value_name("SECONDS")->default_value(10),
       "a peer daemon silent this long is lost (fractions allowed)")
    ("stuck-after", po::value(&s.stuck_after)->value_name("SECONDS")->default_value(60),
       "a barrier or key wait parked this long is stuck: logged once with the ranks it waits "
       "for, and marked in `muster status` (fractions allowed)")
    ("node-name", po::value(&s.o.config.node_name)->value_name("NAME"),
       "what other nodes' progress lines and `muster status` call this node while a "
       "multi-node rendezvous forms (default: the host name)")
    ("tree-width", po::value(&s.o.config.tree_width)->value_name("N")->default_value(16),
       "in jobs this daemon coordinates, barriers and key waits are relayed through a tree "
       "of N children per daemon (the coordinator handles O(N) messages per operation); "
       "jobs of at most N nodes, or N = 0, use a flat star")
    ("peer-plain", po::bool_switch(&s.o.config.peer_keys.plain),
       "peer without encryption or authentication (a trusted network only); otherwise "
       "peering needs a CURVE key pair (--peer-key-file)")
    ("peer-key-file", po::value(&s.peer_key_file)->value_name("FILE"),
       "this daemon's CURVE key pair, as written by `muster keygen --out FILE`")
    ("peer-authorized-keys", po::value(&s.peer_authorized_keys)->value_name("FILE"),
       "public keys (one a line) of the daemons allowed to peer with this one; its own key is "
       "always allowed (default: only its own)")
    ("peer-server-key", po::value(&s.o.config.peer_keys.server_key)->value_name("KEY"),
       "public key (Z85) expected of the daemons this one connects to (default: its own)")
    ("containment", po::value(&s.o.config.containment)->value_name("MODE")->default_value("auto"),
       "auto: each job gets a cgroup (in this daemon's cgroup v2 hierarchy, when writable) that "
       "is killed and removed when the job ends or its launcher dies; guardian: no cgroups, "
       "only muster run's guardian kills what a job leaves (the fallback where no hierarchy "
       "is writable)")
    ("foreign-gpu-use", po::value(&s.o.config.foreign_gpu_use)->value_name("MODE")->default_value("refuse"),
       "refuse: a GPU running a compute process that is not muster's (not a rank, nor a "
       "descendant of one) is not leased; warn: it is leased, with a warning in the log")
    ("slurm-gpus", po::value(&s.o.config.slurm_gpus)->value_name("MODE")->default_value("client"),
       "client: a job's device list and Slurm variables may only narrow the GPUs it is given; "
       "verified: Slurm is the authority -- a GPU is leased only to a process of a Slurm job "
       "(found through the kernel: its cgroup, or a slurmstepd above it) whose allocation, as "
       "muster's prolog hook recorded it in --slurm-dir, includes it")
    ("slurm-dir", po::value(&s.o.config.slurm_dir)->value_name("DIR")->default_value("/run/muster/slurm"),
       "where `muster slurm-hook prolog` records each Slurm job's allocation on this node "
       "(root's, writable by no one else)")
    ("fd-reserve", po::value(&s.o.config.fd_reserve)->value_name("N")->default_value(0),
       "file descriptors kept free below the open-file limit (which musterd raises to the hard "
       "limit at start): with the limit less N in use, new local and peer connections wait "
       "until some end; 0 = the larger of 384 and a sixteenth of the limit")
    ("reply-queue", po::value(&s.o.config.reply_queue)->value_name("N")->default_value(8),
       "replies queued for one local connection that does not read them; one more is "
       "dropped (the client sends its request again), so a connection holds at most N+1 "
       "replies (a reply is at most 65 MiB, a get's at most 64 MiB)")
    ("max-connections-per-uid", po::value(&s.o.config.max_conns_per_uid)->value_name("N")->default_value(s.o.config.max_conns_per_uid),
       "connections one local user may hold open at once; the next is refused at its "
       "handshake (the client reports quota_exceeded); 0 = no cap")
    ("max-connections-per-peer", po::value(&s.o.config.max_conns_per_peer)->value_name("N")->default_value(s.o.config.max_conns_per_peer),
       "connections one remote address may hold open to the peer port at once; the next is "
       "refused at its handshake; 0 = no cap")
    ("max-store-bytes", po::value(&s.o.config.quotas.store_bytes)->value_name("N")->default_value(s.o.config.quotas.store_bytes),
       "quota: bytes of keys and values in one job's store (256 MiB); a set over it gets "
       "quota_exceeded; 0 = no limit")
    ("max-store-keys", po::value(&s.o.config.quotas.store_keys)->value_name("N")->default_value(s.o.config.quotas.store_keys),
       "quota: keys in one job's store; 0 = no limit")
    ("max-parked-waits", po::value(&s.o.config.quotas.parked_waits)->value_name("N")->default_value(s.o.config.quotas.parked_waits),
       "quota: requests parked at once in one job (store get/wait with a timeout, barrier "
       "arrivals); 0 = no limit")
        ("metrics-listen", po::value(&s.o.config.metrics_listen)->value_name("ADDR[:PORT]"),
       "serve Prometheus metrics on http://ADDR:PORT/metrics and a health check on /healthz, "
       "e.g. 127.0.0.1 or [::1]; PORT defaults to muster's own, 29401; 0 = any free one "
       "(default: off; the metrics name jobs: keep them to the loopback or a trusted network)")
    ("job-mapping-dir", po::value(&s.o.config.job_mapping_dir)->value_name("DIR"),
       "keep dcgm-exporter's HPC job mapping in DIR (its --hpc-job-mapping-dir): a file per "
       "GPU, named by its index, holding the id of the job that leases it (default: off)")
    ("max-jobs-per-uid", po::value(&s.o.config.quotas.jobs_per_uid)->value_name("N")->default_value(s.o.config.quotas.jobs_per_uid),
       "quota: jobs one uid may own on this daemon at once; 0 = no limit")
    ("max-memory", po::value(&s.o.config.max_memory)->value_name("BYTES")->default_value("auto"),
       "ceiling on the memory of all stores and parked requests (e.g. 4G); a user may take half "
       "alone, 1/N with N active; auto = half of memory.max, else MemAvailable/4; none = none")
    ("max-state-bytes", po::value(&s.o.config.max_state_bytes)->value_name("BYTES")->default_value("auto"),
       "ceiling on the stores' bytes the state directory keeps (on disk up to 3x), shared as "
       "--max-memory; auto = a sixth of its file system's size; none = no ceiling");
  // clang-format on
  return d;
}

int64_t group_id(const std::string& name) {
  if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos)
    return std::stoll(name);
  std::vector<char> buf(16384);
  struct group g {};
  struct group* found = nullptr;
  int err = ::getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found);
  if (err != 0 || !found) throw std::runtime_error("--socket-group: no group named '" + name + "'");
  return found->gr_gid;
}

void check_peer_bind(const std::string& addr) {
  if (addr.empty()) return;
  if (addr.find("://") != std::string::npos)
    throw std::runtime_error("--peer-bind takes an address such as 0.0.0.0, not an endpoint ('" +
                             addr + "')");
  if (addr.find_first_of(" \t") != std::string::npos)
    throw std::runtime_error("--peer-bind: '" + addr + "' contains blanks");
  if (addr.front() != '[' && std::count(addr.begin(), addr.end(), ':') == 1)
    throw std::runtime_error("--peer-bind takes the address only ('" +
                             addr.substr(0, addr.find(':')) + "'); the port is --peer-port");
}

// The checks Boost cannot do; messages name the option. `whole`: all the
// settings are in (not one config file line on its own), so the peering
// settings are checked together too.
void finish(Settings& s, bool whole) {
  auto& c = s.o.config;
  if (!s.devices.empty()) {
    c.devices = parse_device_list(s.devices);
    c.devices_given = true;
  }
  if (c.node_name.size() > 256 ||
      std::any_of(c.node_name.begin(), c.node_name.end(),
                  [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; }))
    throw std::runtime_error("--node-name must be at most 256 printable bytes");
  if (c.tree_width > 65536) throw std::runtime_error("--tree-width must be between 0 and 65536");
  parse_ceilings(c.quotas, c.max_memory, c.max_state_bytes);
  if (c.reply_queue < 1 || c.reply_queue > 100000)
    throw std::runtime_error("--reply-queue must be between 1 and 100000");
  if (c.fd_reserve > (uint64_t{1} << 30))
    throw std::runtime_error("--fd-reserve must be between 0 and 1073741824");
  if (c.simulate_gpus < -1 || c.simulate_gpus > 4096)
    throw std::runtime_error("--simulate-gpus must be between -1 and 4096");
  log::Level lvl;
  if (!log::parse_level(s.o.log_level, lvl))
    throw std::runtime_error("unknown --log-level '" + s.o.log_level + "'");
  if (c.runtime_dir.empty() || c.runtime_dir[0] != '/')
    throw std::runtime_error("--runtime-dir must be an absolute path");
  if (!c.state_dir.empty() && c.state_dir[0] != '/')
    throw std::runtime_error("--state-dir must be an absolute path");
  c.socket_gid = s.socket_group.empty() ? -1 : group_id(s.socket_group);
  if (c.foreign_gpu_use != "refuse" && c.foreign_gpu_use != "warn")
    throw std::runtime_error("--foreign-gpu-use must be refuse or warn, not '" + c.foreign_gpu_use +
                             "'");
  if (c.slurm_gpus != "client" && c.slurm_gpus != "verified")
    throw std::runtime_error("--slurm-gpus must be client or verified, not '" + c.slurm_gpus + "'");
  if (c.slurm_dir.empty() || c.slurm_dir[0] != '/')
    throw std::runtime_error("--slurm-dir must be an absolute path");
  if (c.containment != "auto" && c.containment != "guardian")
    throw std::runtime_error("--containment must be auto or guardian, not '" + c.containment + "'");

  if (!c.metrics_listen.empty()) {
    if (!HAVE_METRICS)
      throw std::runtime_error(
          "--metrics-listen: musterd was built without metrics (the meson feature 'metrics' "
          "needs libmicrohttpd)");
    metrics::parse_listen_address(c.metrics_listen);
  }
  if (!c.job_mapping_dir.empty() && c.job_mapping_dir[0] != '/')
    throw std::runtime_error("--job-mapping-dir must be an absolute path");
  check_peer_bind(c.peer_bind);
  if (c.peer_port < 0 || c.peer_port > 65535)
    throw std::runtime_error("--peer-port must be between 0 and 65535 (0 = any free port)");
  if (!std::isfinite(s.peer_timeout) || s.peer_timeout < 0.001 || s.peer_timeout > 86400)
    throw std::runtime_error("--peer-timeout must be between 0.001 and 86400 seconds");
  c.peer_timeout = std::chrono::milliseconds(std::llround(s.peer_timeout * 1000));
  if (!std::isfinite(s.stuck_after) || s.stuck_after < 0.001 || s.stuck_after > 86400)
    throw std::runtime_error("--stuck-after must be between 0.001 and 86400 seconds");
  c.stuck_after = std::chrono::milliseconds(std::llround(s.stuck_after * 1000));
  peer::PeerSettings& p = c.peer_keys;
  if (!s.peer_key_file.empty()) p.own = peer::read_key_file(s.peer_key_file);
  if (!s.peer_authorized_keys.empty())
    p.authorized_keys = peer::read_authorized_keys(s.peer_authorized_keys);
  if (!p.server_key.empty()) peer::check_z85_key(p.server_key, "--peer-server-key");
  // Peering set up at all: it must be usable (keys, or plain on purpose).
  bool peering = !c.peer_bind.empty() || p.plain || !s.peer_key_file.empty() ||
                 !s.peer_authorized_keys.empty() || !p.server_key.empty();
  if (whole && peering) {
    try {
      peer::Security::from_settings(p);
    } catch (const std::exception& e) {
      std::string why = e.what();
      throw std::runtime_error(
          (c.peer_bind.empty() ? "peering: " : "--peer-bind " + c.peer_bind + ": ") + why);
    }
  }
}

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

using Lines = std::vector<std::pair<std::string, std::string>>;

// One spelling rule for the command line and the file, as muster run has:
// a name may use '_' for '-' (simulate_gpus is simulate-gpus).
std::string dashed(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

// " (did you mean 'X'?)" when one known name is within two edits of name.
std::string did_you_mean(const std::string& name, const po::options_description& desc,
                         const char* dashes) {
  std::string best;
  size_t best_d = 3;
  for (const auto& o : desc.options())
    if (size_t d = edit_distance(name, o->long_name()); d < best_d) {
      best_d = d;
      best = o->long_name();
    }
  return best.empty() ? "" : " (did you mean '" + std::string(dashes) + best + "'?)";
}

// Stores checked `name = value` settings as po::parse_config_file would,
// less its comment rule ('#' anywhere), which would cut keys in two.
void store_settings(const Lines& lines, const po::options_description& desc,
                    po::variables_map& vm) {
  po::parsed_options parsed(&desc);
  for (const auto& [key, value] : lines) {
    po::option o;
    o.string_key = key;
    o.value.push_back(value);
    o.original_tokens = {key, value};
    parsed.options.push_back(std::move(o));
  }
  po::store(parsed, vm);
}

// '#' at the start of a line or after a blank starts a comment; inside a
// word it is text (CURVE keys in Z85 may contain '#', never start with it).
std::string strip_comment(const std::string& line) {
  for (size_t i = 0; i < line.size(); ++i)
    if (line[i] == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t'))
      return line.substr(0, i);
  return line;
}

// Checks each `name = value` line on its own (Boost's errors carry no line
// numbers) and returns its settings, for store_settings.
Lines read_config(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read config file '" + file + "'");
  std::string line;
  Lines good;
  std::map<std::string, int> seen;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string where = "config file " + file + ", line " + std::to_string(n) + ": ";
    std::string text = trim(strip_comment(line));
    if (text.empty()) continue;
    if (text.front() == '[')
      throw std::runtime_error(where + "sections such as '" + text + "' are not supported");
    auto eq = text.find('=');
    if (eq == std::string::npos)
      throw std::runtime_error(where + "expected 'name = value', got '" + text + "'");
    std::string key = dashed(trim(text.substr(0, eq))), value = trim(text.substr(eq + 1));
    Settings scratch;
    auto desc = settings_description(scratch);
    if (key.empty()) throw std::runtime_error(where + "no option name before '='");
    if (!desc.find_nothrow(key, false))
      throw std::runtime_error(where + "unknown option '" + trim(text.substr(0, eq)) + "'" +
                               did_you_mean(key, desc, ""));
    // Boost reads an empty value as true: an opt-in must be said outright.
    if (key == "peer-plain" && value.empty())
      throw std::runtime_error(where + "option 'peer-plain' needs a value: true or false");
    if (auto [it, fresh] = seen.emplace(key, n); !fresh)
      throw std::runtime_error(where + "option '" + key + "' is already set on line " +
                               std::to_string(it->second));
    try {
      po::variables_map vm;
      store_settings({{key, value}}, desc, vm);
      po::notify(vm);
      finish(scratch, false);
    } catch (const std::exception& e) {
      throw std::runtime_error(where + "bad value '" + value + "' for option '" + key +
                               "': " + e.what());
    }
    good.emplace_back(key, value);
  }
  if (in.bad()) throw std::runtime_error("cannot read config file '" + file + "'");
  return good;
}

// `flag SECTION SPELLING SHORT METAVAR HELP` a line (tab-separated), as
// scripts/gen_manuals.py reads them for the man pages and the completion.
void dump(const po::options_description& d, const std::string& section) {
  for (const auto& o : d.options()) {
    std::string name = o->format_name();  // "-h [ --help ]" or "--runtime-dir"
    std::string shortname = name.size() > 3 && name[2] == ' ' ? name.substr(1, 1) : "";
    std::string metavar = o->format_parameter();  // "DIR (=/run/muster)", "" for a switch
    std::cout << "flag\t" << section << "\t--" << o->long_name() << "\t" << shortname << "\t"
              << metavar << "\t" << o->description() << "\n";
  }
}

}  // namespace

// Longer than 80 lines because it is the one place where the command line,
// the config file and their spelling rule meet, in the order they apply.
std::optional<Options> parse_options(int argc, char** argv) {
  Settings s;
  po::options_description cli("musterd options");
  // clang-format off
  cli.add_options()
    ("help,h", "print this help and exit")
    ("version,V", "print the version and exit")
    ("config", po::value<std::string>()->value_name("FILE"),
       "read settings from FILE ('name = value' a line, the names below; '#' at the start or "
       "after a blank starts a comment); "
       "'' reads none (default: /etc/muster/musterd.conf when it exists)")
    ("no-config", "read no config file")
    ("check-config", "check the command line and the config file, say so, exit 0 (2 when bad)");
  // clang-format on
  auto common = settings_description(s);
  po::options_description all;
  all.add(cli).add(common);
  // Not in --help: the build makes the manuals of what it prints.
  po::options_description hidden;
  hidden.add_options()("dump-options", "print every option for the manuals and exit");
  po::options_description parsed;
  parsed.add(all).add(hidden);
  po::variables_map vm;
  // --simulate_gpus is --simulate-gpus, as in the file (dashed above); a
  // value after '=' is left as it is.
  std::vector<std::string> args(argv + 1, argv + argc);
  for (auto& a : args)
    if (a.rfind("--", 0) == 0) {
      auto eq = a.find('=');
      a = dashed(a.substr(0, eq)) + (eq == std::string::npos ? "" : a.substr(eq));
    }
  try {
    try {
      po::store(po::command_line_parser(args).options(parsed).run(), vm);
    } catch (const po::unknown_option& e) {
      std::string name = e.get_option_name();
      name.erase(0, name.find_first_not_of('-'));
      throw std::runtime_error(std::string(e.what()) + did_you_mean(name, all, "--"));
    }
    if (vm.count("dump-options")) {
      dump(cli, "command-line");
      dump(common, "settings");
      return std::nullopt;
    }
    if (vm.count("help")) {
      std::cout << "musterd " MUSTER_VERSION
                   " - node-local daemon for GPU leases, ranks and job stores\n\n"
                << "Usage: musterd [OPTIONS]\n\n"
                << all
                << "\nCommand-line settings win over the config file's. Bad options and bad "
                   "config lines exit with code 2 before anything is bound.\n"
                   "Clients find the daemon through MUSTER_ENDPOINT, else MUSTER_RUNTIME_DIR, "
                   "else the default runtime directory.\n"
                   "Log lines go to stderr, or to the journal with JOB=, RANK=, GPU= and PEER= "
                   "fields when stderr is the journal (a build with libsystemd); "
                   "MUSTER_LOG_SINK=journal, stderr or "
                   "file:PATH chooses.\n";
      return std::nullopt;
    }
    if (vm.count("version")) {
      // What a node has of the GPU libraries is only known by loading them:
      // nothing of them is linked (readelf -d musterd names none).
      std::cout << "musterd " MUSTER_VERSION "\n" << gpu::libraries_summary();
      return std::nullopt;
    }
    if (vm.count("no-config") && vm.count("config") && !vm["config"].as<std::string>().empty())
      throw std::runtime_error("--config and --no-config contradict each other");
    std::string file;
    if (vm.count("config"))
      file = vm["config"].as<std::string>();
    else if (!vm.count("no-config") && ::access(kDefaultConfigFile, F_OK) == 0)
      file = kDefaultConfigFile;
    if (!file.empty()) {
      store_settings(read_config(file), common, vm);
    }
    po::notify(vm);
    s.o.config_file = file;
  } catch (const po::error& e) {
    throw std::runtime_error(e.what());
  }
  finish(s, true);
  if (vm.count("check-config")) {
    s.o.check_only = true;
    s.o.check_summary = s.o.config_file.empty()
                            ? "configuration OK (no config file, the command line only)"
                            : "configuration OK (" + s.o.config_file + " and the command line)";
  }
  return s.o;
}

}  // namespace muster::daemon
