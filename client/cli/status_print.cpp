// `muster status` once: the tables (GPUs, jobs, ranks, open waits) or JSON.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <unistd.h>

#include "cli/daemon_probe.hpp"
#include "cli/gpu_table.hpp"
#include "cli/status_view.hpp"
#include "endpoint.hpp"
#include "escape.hpp"
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
    // A key or barrier name is any text its job chose: escaped, it cannot
    // drive the reader's terminal or forge a line (also under --watch).
    std::string line = escape(to_string(w));
    if (!w.stuck)
      std::printf("    %s\n", line.c_str());
    else if (color)
      std::printf("    \x1b[1;31mSTUCK %s\x1b[0m\n", line.c_str());
    else
      std::printf("    STUCK %s\n", line.c_str());
  }
  if (j.waits_left_out)
    std::printf("    (%llu more waits not listed)\n",
                static_cast<unsigned long long>(j.waits_left_out));
}

}  // namespace

bool no_color() {
  const char* v = std::getenv("NO_COLOR");
  return v && *v;
}

void print_table(const DaemonStatus& s, const std::string& endpoint, bool color) {
  std::printf("musterd %s (pid %lld) at %s, up %.0f s\n", escape(s.version).c_str(),
              static_cast<long long>(s.pid), escape(endpoint).c_str(), s.uptime_s);
  if (!s.containment.empty()) std::printf("containment: %s\n", escape(s.containment).c_str());
  print_gpu_table(s);
  if (s.jobs.empty()) {
    std::printf("\nJobs: none\n");
    return;
  }
  for (const auto& j : s.jobs) {
    std::string owner = j.uid >= 0 ? "  uid " + std::to_string(j.uid) : "";
    std::printf("\nJob %s%s  generation %llu  world size %u (%u on this node)\n",
                escape(j.id).c_str(), owner.c_str(), static_cast<unsigned long long>(j.generation),
                j.world_size, j.local_world_size);
    if (auto forming = to_string(j.forming); !forming.empty())
      std::printf("  rendezvous: %s\n", escape(forming).c_str());
    if (!j.numa_binding.empty())
      std::printf("  numa binding: %s\n", escape(j.numa_binding).c_str());
    std::printf("  %-6s %-10s %-10s %-6s %-8s %s\n", "RANK", "LOCAL", "PID", "GPU", "STATE",
                "CPUS");
    for (const auto& r : j.ranks) {
      std::string dev = r.device >= 0 ? std::to_string(r.device) : "-";
      std::string cpus = r.cpus.empty() ? "-" : escape(r.cpus);
      std::printf("  %-6u %-10u %-10lld %-6s %-8s %s\n", r.rank, r.local_rank,
                  static_cast<long long>(r.pid), dev.c_str(), escape(r.state).c_str(),
                  cpus.c_str());
    }
    if (j.ranks_left_out)
      std::printf("  (%llu more ranks not listed: muster status --job %s)\n",
                  static_cast<unsigned long long>(j.ranks_left_out), j.id.c_str());
    print_waits(j, color);
  }
  if (s.jobs_left_out)
    std::printf("\n(%llu more jobs not listed: the reply is bounded; muster status --job ID)\n",
                static_cast<unsigned long long>(s.jobs_left_out));
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
    if (o.owner_uid >= 0) {
      // Only that user's jobs: a name alone does not say whose job it is.
      std::erase_if(s.jobs, [&](const JobInfo& j) { return j.uid != o.owner_uid; });
      if (!o.job.empty() && s.jobs.empty())
        throw Error(ErrorCode::kUnknownJob, "no job '" + o.job + "' of uid " +
                                                std::to_string(o.owner_uid) + " on this daemon");
    }
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
