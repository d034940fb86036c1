#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace muster {

// "0,1,4,6" -> {0,1,4,6} (CUDA_VISIBLE_DEVICES style); throws
// std::runtime_error naming the bad item.
std::vector<int64_t> parse_device_list(const std::string& s);

// The GPUs a CUDA_VISIBLE_DEVICES value (set by a scheduler or a container)
// leaves visible, as NVML indices in its order: a GPU's position in the
// result is the ordinal CUDA gives it (workers run with
// CUDA_DEVICE_ORDER=PCI_BUS_ID, so a plain index is NVML's). Items are
// indices or UUIDs ("GPU-…", or any prefix naming one GPU, as CUDA
// accepts); like CUDA, the list ends at the first item that names no GPU.
// uuids[i]: the UUID of NVML index i ("" where unknown).
std::vector<int64_t> visible_devices(const std::string& cvd, const std::vector<std::string>& uuids);

// The position of NVML index `device` among `visible`, or -1.
int64_t visible_ordinal(const std::vector<int64_t>& visible, int64_t device);

}  // namespace muster
