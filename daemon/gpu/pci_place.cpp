// Where the kernel puts a GPU: its PCI device's NUMA node and nearby CPUs,
// from sysfs. The root is / unless MUSTER_TEST_SYSROOT names a fake tree
// (tests only: a node with NUMA that NVML cannot report).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gpu/nvml.hpp"

namespace muster::gpu {

namespace {

std::string sysroot() {
  const char* r = std::getenv("MUSTER_TEST_SYSROOT");
  return r && *r ? r : "";
}

// The first line of a small sysfs file, "" when it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line)) return "";
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace

PciPlace pci_place(const std::string& bus_id) {
  PciPlace out;
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  char tail = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &tail) != 4)
    return out;
  // sysfs spells it "0000:3b:00.0": four-digit domain, lower case.
  char name[32];
  std::snprintf(name, sizeof name, "%04x:%02x:%02x.%x", domain, bus, dev, fn);
  std::string dir = sysroot() + "/sys/bus/pci/devices/" + name + "/";
  std::string numa = first_line(dir + "numa_node");
  char* end = nullptr;
  long v = numa.empty() ? -1 : std::strtol(numa.c_str(), &end, 10);
  if (!numa.empty() && end && *end == '\0' && v >= 0 && v < (1 << 16)) out.numa = v;
  out.cpus = first_line(dir + "local_cpulist");
  return out;
}

bool cpu_node(int64_t node) {
  std::ifstream f(sysroot() + "/sys/devices/system/node/node" + std::to_string(node) + "/cpulist");
  if (!f) return true;
  std::string line;
  std::getline(f, line);
  return line.find_first_of("0123456789") != std::string::npos;
}

}  // namespace muster::gpu
