// `muster status` once: the tables (GPUs, jobs, ranks, open waits) or JSON.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <unistd.h>

#include "cli/daemon_probe.hpp"
#include "cli/gpu_table.hpp"
#include "cli/status_view.hpp"
#include "endpoint.hpp"
#include "muster/client.hpp"

namespace muster::cli {

namespace {

// A job's open barriers and key waits, oldest first; stuck ones marked
// (and, on a terminal, in bold red).
void print_waits(const JobInfo& j, bool color) {
  if (j.waits.empty()) return;
  bool spans = j.world_size > j.local_world_size;
  std::printf("  waits%s:\n", j.job_wide ? " (whole job, from its coordinator)"
                              : spans    ? " (this node's ranks; --job ID for the whole job)"
                                         : "");
  for (const auto& w : j.waits) {
    std::string line = to_string(w);
    if (!w.stuck)
      std::printf("    %s\n", line.c_str());
    else if (color)
      std::printf("    \x1b[1;31mSTUCK %s\x1b[0m\n", line.c_str());
    else
      std::printf("    STUCK %s\n", line.c_str());
  }
}

}  // namespace

bool no_color() {
  const char* v = std::getenv("NO_COLOR");
  return v && *v;
}

void print_table(const DaemonStatus& s, const std::string& endpoint, bool color) {
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
    print_waits(j, color);
  }
}

int status_once(const StatusOptions& o) {
  try {
    auto endpoint = resolve_endpoint();
    // Say so at once rather than after the request timeout.
    if (auto p = probe_daemon(endpoint); p.reach != Reach::kOk) {
      std::cerr << "muster status: " << p.sentence << "\n";
      return 1;
    }
    Client c({endpoint});
    auto s = o.job.empty() ? c.status() : c.status(o.job);
    if (o.json)
      std::cout << to_json(s) << "\n";
    else if (o.topology)
      print_topology(s);
    else
      print_table(s, c.endpoint(), o.watch && ::isatty(STDOUT_FILENO) && !no_color());
    std::cout.flush();
    std::fflush(stdout);
  } catch (const Error& e) {
    std::cerr << "muster status: " << e.what() << "\n";
    return e.code() == ErrorCode::kUnknownJob ? 2 : 1;
  }
  return 0;
}

}  // namespace muster::cli
