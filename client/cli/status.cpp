// `muster status`: what the node's daemon holds, as a table or as JSON.
#include <cstdio>
#include <iostream>

#include <unistd.h>

#include "cli/commands.hpp"
#include "cli/gpu_table.hpp"
#include "endpoint.hpp"
#include "muster/client.hpp"

namespace muster::cli {

namespace {
void print_table(const DaemonStatus& s, const std::string& endpoint) {
  std::printf("musterd %s (pid %lld) at %s, up %.0f s\n", s.version.c_str(),
              static_cast<long long>(s.pid), endpoint.c_str(), s.uptime_s);
  if (!s.containment.empty()) std::printf("containment: %s\n", s.containment.c_str());
  print_gpu_table(s);
  if (s.jobs.empty()) {
    std::printf("\nJobs: none\n");
    return;
  }
  for (const auto& j : s.jobs) {
    std::string owner = j.uid >= 0 ? "  uid " + std::to_string(j.uid) : "";
    std::printf("\nJob %s%s  generation %llu  world size %u (%u on this node)\n", j.id.c_str(),
                owner.c_str(), static_cast<unsigned long long>(j.generation), j.world_size,
                j.local_world_size);
    if (auto forming = to_string(j.forming); !forming.empty())
      std::printf("  rendezvous: %s\n", forming.c_str());
    if (!j.numa_binding.empty()) std::printf("  numa binding: %s\n", j.numa_binding.c_str());
    std::printf("  %-6s %-10s %-10s %-6s %-8s %s\n", "RANK", "LOCAL", "PID", "GPU", "STATE",
                "CPUS");
    for (const auto& r : j.ranks) {
      std::string dev = r.device >= 0 ? std::to_string(r.device) : "-";
      std::string cpus = r.cpus.empty() ? "-" : r.cpus;
      std::printf("  %-6u %-10u %-10lld %-6s %-8s %s\n", r.rank, r.local_rank,
                  static_cast<long long>(r.pid), dev.c_str(), r.state.c_str(), cpus.c_str());
    }
  }
}
}  // namespace

std::vector<Flag> status_flags(bool& help, bool& json, bool& topology) {
  return {{"help", 'h', "", "print this help and exit",
           [&help](const std::string& v) { help = switch_value(v); }},
          {"json", 0, "",
           "print one JSON document (devices[] with their topology, jobs[]) instead of tables",
           [&json](const std::string& v) { json = switch_value(v); }},
          {"topology", 0, "",
           "print the GPUs' interconnect matrix (NVLinks, PCIe paths, CPU and NUMA affinity) "
           "as nvidia-smi topo -m does, instead of the tables",
           [&topology](const std::string& v) { topology = switch_value(v); }}};
}

int status_main(const std::vector<std::string>& args) {
  bool help = false, json = false, topology = false;
  FlagParser flags(status_flags(help, json, topology));
  if (!parse_plain("status", flags, args)) return 2;
  if (json && topology) {
    std::cerr << "muster status: --json already carries the topology; give one of --json and "
                 "--topology\n";
    return 2;
  }
  if (help) {
    std::cout << "Usage: muster status [--json | --topology]\n\n"
                 "Shows the GPUs of the node's musterd with their lease holders, and its jobs\n"
                 "with their ranks (and, while a multi-node rendezvous forms, which nodes\n"
                 "joined it). Another user's jobs are not shown, and a GPU one of them\n"
                 "holds shows as (in use); root sees everything. The daemon is found through\n"
                 "MUSTER_ENDPOINT, else MUSTER_RUNTIME_DIR, else the default runtime directory.\n"
                 "--topology shows how each pair of GPUs is connected, as NVML tells the\n"
                 "daemon (NV# for # NVLinks, else the PCIe path), or says that the daemon\n"
                 "does not know; --json carries the same per device.\n\n"
                 "Options:\n"
              << flags.help();
    return 0;
  }
  try {
    auto endpoint = resolve_endpoint();
    // Say so at once rather than after the request timeout.
    if (!ipc_dir_of(endpoint).empty() && ::access(endpoint.substr(6).c_str(), F_OK) != 0) {
      std::cerr << "muster status: no musterd is listening at " << endpoint
                << " (socket file missing; start musterd, or use muster run)\n";
      return 1;
    }
    Client c({endpoint});
    auto s = c.status();
    if (json)
      std::cout << to_json(s) << "\n";
    else if (topology)
      print_topology(s);
    else
      print_table(s, c.endpoint());
  } catch (const Error& e) {
    std::cerr << "muster status: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace muster::cli
