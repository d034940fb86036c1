// `muster status --topology`: how each pair of the daemon's GPUs is
// connected, laid out as nvidia-smi topo -m lays it out, from what NVML
// told the daemon (the status reply's nvlinks and paths, by GPU index).
#include <algorithm>
#include <cstdio>
#include <string>

#include "cli/gpu_table.hpp"

namespace muster::cli {

namespace {

// nvidia-smi's name of an NVML topology level (nvmlGpuTopologyLevel_t).
const char* path_name(int64_t level) {
  switch (level) {
    case 0:  // two GPUs on one board (a K80): its bridge is the one between them
    case 10:
      return "PIX";
    case 20:
      return "PXB";
    case 30:
      return "PHB";
    case 40:
      return "NODE";
    default:
      return "SYS";
  }
}

// The cell of row `a`, column `b`: X for itself, NV# for # NVLinks, else
// the PCIe path; "?" where a's row does not reach b's index.
std::string cell(const DeviceInfo& a, const DeviceInfo& b) {
  if (a.index == b.index) return "X";
  if (b.index < a.nvlinks.size() && a.nvlinks[b.index] > 0)
    return "NV" + std::to_string(a.nvlinks[b.index]);
  if (b.index < a.paths.size()) return path_name(a.paths[b.index]);
  return "?";
}

// The sentence for a daemon whose GPUs carry no topology.
std::string unknown_because(const DaemonStatus& s) {
  const std::string& src = s.gpu_source;
  if (src == "nvml") return "NVML, which does not report their interconnect on this node";
  if (src == "cuda") return "the CUDA runtime (NVML did not load), which does not report it";
  if (src == "simulated") return "--simulate-gpus (simulated GPUs have no interconnect)";
  if (src.empty()) return "a source this daemon does not name (it is older than this client)";
  return src;
}

}  // namespace

void print_topology(const DaemonStatus& s) {
  const auto& devs = s.devices;
  bool known = std::any_of(devs.begin(), devs.end(), [](auto& d) { return !d.paths.empty(); });
  if (devs.empty()) {
    std::printf("topology unknown: this daemon hands out no GPUs\n");
    return;
  }
  if (!known) {
    std::printf("topology unknown: this daemon's GPUs come from %s\n", unknown_because(s).c_str());
    return;
  }
  size_t cpus = std::string("CPU Affinity").size();
  for (const auto& d : devs) cpus = std::max(cpus, d.cpu_affinity.size());
  int cpu_w = static_cast<int>(cpus) + 2;
  std::printf("%-7s", "");
  for (const auto& d : devs) std::printf("%-7s", ("GPU" + std::to_string(d.index)).c_str());
  std::printf("%-*s%s\n", cpu_w, "CPU Affinity", "NUMA Affinity");
  for (const auto& a : devs) {
    std::printf("%-7s", ("GPU" + std::to_string(a.index)).c_str());
    for (const auto& b : devs) std::printf("%-7s", cell(a, b).c_str());
    std::string numa = a.numa_node >= 0 ? std::to_string(a.numa_node) : "N/A";
    std::printf("%-*s%s\n", cpu_w, a.cpu_affinity.empty() ? "N/A" : a.cpu_affinity.c_str(),
                numa.c_str());
  }
  std::printf(
      "\nLegend:\n\n"
      "  X    = Self\n"
      "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
      "(e.g., QPI/UPI)\n"
      "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host "
      "Bridges within a NUMA node\n"
      "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
      "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host "
      "Bridge)\n"
      "  PIX  = Connection traversing at most a single PCIe bridge\n"
      "  NV#  = Connection traversing a bonded set of # NVLinks\n");
}

}  // namespace muster::cli
