// NUMA placement from the GPU's PCI device: nvmlDeviceGetNumaNodeId is
// NOT_SUPPORTED on x86 (GPUs are no NUMA nodes there), and on Grace it is
// the GPU memory's own node. The kernel's numa_node and local_cpulist of
// the PCI device say where it sits; here a fake sysfs tree
// (MUSTER_TEST_SYSROOT) says it for the NVML double's GPUs.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include "muster/client.hpp"
#include "support/muster_cli.hpp"
#include "support/nvml_node.hpp"
#include "support/process.hpp"

using muster::Client;
namespace test = muster::test;

namespace {

// GPU i's PCI device in the fake tree: "0000:18:00.0", as sysfs spells it.
void pci_device(const std::string& root, const std::string& sysfs_bus, const std::string& numa,
                const std::string& cpus) {
  std::string dir = root + "/sys/bus/pci/devices/" + sysfs_bus;
  test::mkdirs(dir);
  test::spit(dir + "/numa_node", numa + "\n");
  if (!cpus.empty()) test::spit(dir + "/local_cpulist", cpus + "\n");
}

void numa_node(const std::string& root, int node, const std::string& cpus) {
  std::string dir = root + "/sys/devices/system/node/node" + std::to_string(node);
  test::mkdirs(dir);
  test::spit(dir + "/cpulist", cpus + "\n");
}

}  // namespace

TEST_CASE("on x86, where NVML's NUMA id is NOT_SUPPORTED, the PCI device's node is the GPU's") {
  // Two GPUs without numa= (the double answers NOT_SUPPORTED) and without
  // cpus=; a third whose PCI device the kernel places nowhere (-1).
  test::NvmlNode node(
      "gpu uuid=GPU-a0 bus=00000000:18:00.0\n"
      "gpu uuid=GPU-a1 bus=00000000:AB:00.0\n"
      "gpu uuid=GPU-a2 bus=00000000:DB:00.0\n");
  pci_device(node.root(), "0000:18:00.0", "0", "0-23,48-71");
  pci_device(node.root(), "0000:ab:00.0", "1", "24-47,72-95");
  pci_device(node.root(), "0000:db:00.0", "-1", "");
  test::TestDaemon d({}, node.env());
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() == 3);
  CHECK(s.devices[0].numa_node == 0);
  CHECK(s.devices[0].cpu_affinity == "0-23,48-71");
  CHECK(s.devices[1].numa_node == 1);
  CHECK(s.devices[1].cpu_affinity == "24-47,72-95");
  CHECK(s.devices[2].numa_node == -1);
}

TEST_CASE("NVML's NUMA id counts only where that node has CPUs (not Grace's GPU memory node)") {
  // GH200-like: NVML says node 4 (the GPU's HBM, no CPUs); the kernel has
  // no numa_node for the PCI device here. A second GPU's NVML node 1 has
  // CPUs: it stands.
  test::NvmlNode node(
      "gpu uuid=GPU-b0 bus=00000000:01:00.0 numa=4\n"
      "gpu uuid=GPU-b1 bus=00000000:02:00.0 numa=1\n");
  numa_node(node.root(), 4, "");
  numa_node(node.root(), 1, "72-143");
  test::TestDaemon d({}, node.env());
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() == 2);
  CHECK(s.devices[0].numa_node == -1);
  CHECK(s.devices[1].numa_node == 1);
}

TEST_CASE("the PCI device's node wins over NVML's GPU memory node") {
  test::NvmlNode node("gpu uuid=GPU-c0 bus=0009:01:00.0 numa=4 cpus=0-71\n");
  numa_node(node.root(), 4, "");
  pci_device(node.root(), "0009:01:00.0", "0", "");
  test::TestDaemon d({}, node.env());
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() == 1);
  CHECK(s.devices[0].numa_node == 0);
  CHECK(s.devices[0].cpu_affinity == "0-71");  // NVML's, where sysfs gives no list
}
