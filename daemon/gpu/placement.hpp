// Which free GPUs a job of k ranks gets, as an expert would pick them: the
// set on the fewest NUMA nodes (a job that fits on one socket stays there),
// then with the best interconnect (most NVLink-connected pairs, then the
// most links, then the fewest PCIe hops), ties
// broken so that what stays free is as well connected as possible for the
// next job, then by lowest index. Ranks are ordered along the ring that
// interconnect gives. Where the topology is unknown every set ties and the
// lowest free indices win, as before placement existed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpu/inventory.hpp"

namespace muster::gpu {

// `free`: the devices that may be given (healthy, not leased, allowed), in
// index order. `held`: devices the job already holds (a rank joining a job
// that runs), scored with the set so that its GPUs stay together. Returns
// n NVML indices in ring order; requires free.size() >= n.
std::vector<uint32_t> place(const std::vector<const Device*>& free, size_t n,
                            const std::vector<const Device*>& held = {});

}  // namespace muster::gpu
