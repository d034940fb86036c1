#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace muster {

// "0,1,4,6" -> {0,1,4,6} (CUDA_VISIBLE_DEVICES style); throws
// std::runtime_error naming the bad item.
std::vector<int64_t> parse_device_list(const std::string& s);

// The GPUs a CUDA_VISIBLE_DEVICES value (set by a scheduler or a container)
// leaves visible, as NVML indices in its order: a GPU's position in the
// result is the ordinal CUDA gives it. `seen`: the NVML indices of the GPUs
// CUDA enumerates in this process, in PCI bus order (workers run with
// CUDA_DEVICE_ORDER=PCI_BUS_ID) — under a cgroup or container that allows
// a subset (Slurm's ConstrainDevices), only those. Items are integers,
// positions in `seen` (not NVML indices), or UUIDs ("GPU-…", or any prefix
// naming one seen GPU, as CUDA accepts); like CUDA, the list ends at the
// first item that names no GPU. A MIG instance ("MIG-…") throws
// std::runtime_error with a sentence: muster leases whole GPUs.
// uuids[i]: the UUID of NVML index i ("" where unknown).
std::vector<int64_t> visible_devices(const std::string& cvd, const std::vector<std::string>& uuids,
                                     const std::vector<int64_t>& seen);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML and nvidia-smi write
// the 16 bytes of a UUID that the CUDA driver and runtime give.
std::string gpu_uuid_text(const char (&bytes)[16]);

// A GPU as the daemon's status shows it, by NVML index.
struct SeenGpu {
  std::string uuid;
  std::string pci_bus_id;
  // Lost to the driver (NVML_ERROR_GPU_IS_LOST: fallen off the bus): CUDA
  // does not enumerate it, so it takes no ordinal and integers after it
  // count one less.
  bool lost = false;
};

// Whether a status reason says the GPU is lost: the daemon's reason for
// NVML_ERROR_GPU_IS_LOST starts with this (daemon/gpu/nvml_health.cpp).
inline constexpr const char* kLostReasonPrefix = "lost:";
bool lost_reason(const std::string& reason);

// The NVML indices of the GPUs CUDA can open in this process, in PCI bus
// order, lost GPUs left out: those whose /dev/nvidiaN opens (N: the minor number the driver
// gives in /proc/driver/nvidia/gpus/<bus>/information); every GPU where
// the driver's /proc files are absent. Read under $MUSTER_TEST_SYSROOT
// instead of / when set (tests: a cgroup's or container's subset).
std::vector<int64_t> cuda_devices(const std::vector<SeenGpu>& gpus);

// The GPUs visible to this process in CUDA's order (CUDA_VISIBLE_DEVICES
// `cvd`, null when unset, over cuda_devices()), as NVML indices; nullopt
// when every GPU is, in NVML's order (ordinals are NVML indices). Throws
// std::runtime_error for a MIG instance in cvd.
std::optional<std::vector<int64_t>> visible_gpus(const char* cvd, const std::vector<SeenGpu>& gpus);

// The position of NVML index `device` among `visible`, or -1.
int64_t visible_ordinal(const std::vector<int64_t>& visible, int64_t device);

}  // namespace muster
