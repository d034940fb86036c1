#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace muster {

// "0,1,4,6" -> {0,1,4,6} (CUDA_VISIBLE_DEVICES style); throws
// std::runtime_error naming the bad item.
std::vector<int64_t> parse_device_list(const std::string& s);

}  // namespace muster
