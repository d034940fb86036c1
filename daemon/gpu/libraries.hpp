// Which GPU libraries this daemon finds at run time, for `musterd --version`
// and its start-up log: nothing GPU-related is linked, so what a node has is
// only known by trying to load it.
#pragma once

#include <string>

namespace muster::gpu {

// "NVML: found, driver 580.65.06, NVML 13.580.65.06\nCUDA driver: ..." — one
// line per library, each "found, <versions>", "not found (<why>)" or
// "disabled in this build".
std::string libraries_summary();

// The CUDA driver API's line (cuda.cpp, beside the inventory fallback).
std::string cuda_driver_version();

}  // namespace muster::gpu
