// What GPUs this node has. Discovery never needs a GPU library at build time:
// NVML is loaded with dlopen, the CUDA runtime only when the build found it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace muster::gpu {

// A compute process NVML sees on a GPU.
struct Process {
  int64_t pid = 0;
  uint64_t used_bytes = 0;
  bool operator==(const Process&) const = default;
};

// How two GPUs reach each other over PCIe: NVML's nvmlGpuTopologyLevel_t
// values (the closest common ancestor), as nvidia-smi topo -m names them.
enum class Path : int32_t {
  kSelf = 0,         // NVML_TOPOLOGY_INTERNAL: the same board   ("X")
  kSwitch = 10,      // NVML_TOPOLOGY_SINGLE: one PCIe switch      (PIX)
  kSwitches = 20,    // NVML_TOPOLOGY_MULTIPLE: several switches   (PXB)
  kHostBridge = 30,  // NVML_TOPOLOGY_HOSTBRIDGE: one host bridge  (PHB)
  kNumaNode = 40,    // NVML_TOPOLOGY_NODE: one NUMA node           (NODE)
  kSystem = 50,      // NVML_TOPOLOGY_SYSTEM: across sockets (SYS); also unknown
};

struct Device {
  uint32_t index = 0;  // NVML's, which is PCI bus order
  std::string name;
  std::string uuid{};        // "GPU-8c1f…"; empty where the source has none
  std::string pci_bus_id{};  // "00000000:3B:00.0"
  uint64_t memory_bytes = 0;
  int64_t numa_node = -1;            // -1: unknown
  std::string cpu_affinity{};        // the CPUs near it, "0-23,48-71"
  std::string compute_mode{};        // default | exclusive_process | prohibited
  bool mig = false;                  // MIG mode enabled
  std::vector<Process> processes{};  // at discovery
  // Indexed by the other GPU's NVML index: active NVLinks between the two
  // (through NVSwitches too), and their common PCIe ancestor (Path values).
  // Empty when the source cannot say (no NVML, simulated GPUs).
  std::vector<uint32_t> nvlinks{};
  std::vector<int32_t> paths{};
  // Why this GPU is never leased (ECC errors, lost, MIG, …); empty = healthy.
  std::string quarantine{};
};

class Nvml;

struct Inventory {
  std::vector<Device> devices;
  std::string source;  // "nvml", "cuda", "simulated" or "none"
  // The loaded NVML (kept for the daemon's life: processes and events are
  // asked again later); null for other sources.
  std::shared_ptr<Nvml> nvml;
};

// simulate >= 0 pretends that many devices exist (tests, demos).
Inventory discover(int simulate);

// Kept apart so each can be tried (and fail) on its own. The library is
// $MUSTER_NVML_LIBRARY when set (tests' NVML double), else the driver's.
std::shared_ptr<Nvml> load_nvml(std::vector<Device>& out);
bool discover_cuda(std::vector<Device>& out);

}  // namespace muster::gpu
