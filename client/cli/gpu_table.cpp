// The GPU table of `muster status`: each GPU's holder, and what NVML told
// the daemon of it (UUID, NUMA node, health).
#include <unistd.h>

#include <cstdio>
#include <string>

#include "cli/gpu_table.hpp"
#include "escape.hpp"

namespace muster::cli {

void print_gpu_table(const DaemonStatus& s) {
  if (s.devices.empty()) {
    std::printf("\nGPUs: none handed out by this daemon\n");
    return;
  }
  std::printf("\n%-4s %-24s %-40s %-4s %-12s %-20s %-6s %s\n", "GPU", "NAME", "UUID", "NUMA",
              "HEALTH", "JOB", "RANK", "PID");
  for (const auto& d : s.devices) {
    std::string numa = d.numa_node >= 0 ? std::to_string(d.numa_node) : "-";
    std::string uuid = d.uuid.empty() ? "-" : d.uuid;
    std::printf("%-4u %-24s %-40s %-4s %-12s ", d.index, escape(d.name).c_str(),
                escape(uuid).c_str(), numa.c_str(), d.health.c_str());
    if (d.job.empty() && d.in_use)  // another user's: who holds it is theirs to know
      std::printf("%-20s %-6s %s\n", "-", "-", "(in use)");
    else if (d.job.empty())
      std::printf("%-20s %-6s %s\n", "-", "-", d.health == "ok" ? "(free)" : "(not leased)");
    else  // another owner's job of the same name is told apart by its uid
      std::printf("%-20s %-6lld %lld\n",
                  (escape(d.job) + (d.owner >= 0 && d.owner != static_cast<int64_t>(::getuid())
                                        ? " (uid " + std::to_string(d.owner) + ")"
                                        : ""))
                      .c_str(),
                  static_cast<long long>(d.rank), static_cast<long long>(d.pid));
    if (!d.reason.empty()) std::printf("     %s\n", escape(d.reason).c_str());
  }
}

}  // namespace muster::cli
