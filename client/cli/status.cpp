// `muster status`: what the node's daemon holds, as a table or as JSON,
// once or (--watch) until interrupted.

#include <charconv>
#include <cmath>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/posix_io.hpp"
#include "cli/status_view.hpp"

namespace muster::cli {

namespace {

constexpr const char* kUsage =
    "Usage: muster status [--json | --topology] [--job ID] [--owner USER|UID]\n"
    "                     [--watch [--interval S]]\n\n"
    "Shows the GPUs of the node's musterd with their lease holders, and its jobs\n"
    "with their ranks (and, while a multi-node rendezvous forms, which nodes\n"
    "joined it), and each job's open barriers and key waits: how many ranks\n"
    "arrived, which are missing (rank, node, pid) and for how long; a wait older\n"
    "than the daemon's --stuck-after is marked STUCK. --job ID shows that job\n"
    "only; for a job that spans nodes, its waits are the whole job's, as its\n"
    "coordinator last heard from every node (otherwise this node's ranks' only).\n"
    "--watch shows the status again every --interval seconds (default 2) until\n"
    "interrupted: on a terminal in place, like watch(1); in a pipe one snapshot\n"
    "after another. Another user's jobs are not shown, and a GPU one of them\n"
    "holds shows as (in use); root sees everything. The daemon is found through\n"
    "MUSTER_ENDPOINT, else MUSTER_RUNTIME_DIR, else the default runtime directory.\n"
    "--topology shows how each pair of GPUs is connected, as NVML tells the\n"
    "daemon (NV# for # NVLinks, else the PCIe path), or says that the daemon\n"
    "does not know; --json carries the same per device.\n\n"
    "Options:\n";

int usage_error(const std::string& why) {
  std::cerr << "muster status: " << why << "\n";
  return 2;
}

// --interval: seconds, fractions allowed, 0.1 .. 86400.
bool parse_interval(const std::string& text, double& out) {
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && p == end && std::isfinite(out) && out >= 0.1 && out <= 86400;
}

}  // namespace

std::vector<Flag> status_flags(StatusOptions& o) {
  return {{"help", 'h', "", "print this help and exit",
           [&o](const std::string& v) { o.help = switch_value(v); }},
          {"json", 0, "",
           "print one JSON document (devices[] with their topology, jobs[] with their waits[]) "
           "instead of tables; with --watch, one a line per snapshot",
           [&o](const std::string& v) { o.json = switch_value(v); }},
          {"topology", 0, "",
           "print the GPUs' interconnect matrix (NVLinks, PCIe paths, CPU and NUMA affinity) "
           "as nvidia-smi topo -m does, instead of the tables",
           [&o](const std::string& v) { o.topology = switch_value(v); }},
          {"job", 0, "ID",
           "only this job; for a job that spans nodes, its open barriers and waits across all "
           "its nodes, as its coordinator sees them",
           [&o](const std::string& v) {
             o.job = v;
             o.job_given = true;
           }},
          {"owner", 0, "USER|UID",
           "only the jobs of this user (a job is its owner's: another user's job of the same "
           "name is not this one)",
           [&o](const std::string& v) { o.owner = v; }},
          {"watch", 'w', "",
           "show the status again every --interval seconds until interrupted (in place on a "
           "terminal, appended in a pipe)",
           [&o](const std::string& v) { o.watch = switch_value(v); }},
          {"interval", 'n', "S",
           "seconds between --watch snapshots, fractions allowed (0.1 to 86400; default 2)",
           [&o](const std::string& v) {
             o.interval = v;
             o.interval_given = true;
           }}};
}

int status_main(const std::vector<std::string>& args) {
  StatusOptions o;
  FlagParser flags(status_flags(o));
  if (!parse_plain("status", flags, args)) return 2;
  if (o.help) {
    std::cout << kUsage << flags.help();
    return 0;
  }
  if (o.json && o.topology)
    return usage_error("--json already carries the topology; give one of --json and --topology");
  if (o.watch && o.topology)
    return usage_error("--watch shows the tables or --json, not --topology");
  double interval = 0;
  if (!parse_interval(o.interval, interval))
    return usage_error("--interval takes seconds from 0.1 to 86400, not '" + o.interval + "'");
  if (o.interval_given && !o.watch) return usage_error("--interval goes with --watch");
  if (o.job_given && o.job.empty()) return usage_error("--job needs a job id");
  if (!o.owner.empty()) {
    o.owner_uid = uid_of(o.owner);
    if (o.owner_uid < 0) return usage_error("--owner: no user '" + o.owner + "'");
  }
  return o.watch ? status_watch(o, interval) : status_once(o);
}

}  // namespace muster::cli
