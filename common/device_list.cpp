#include "device_list.hpp"

#include <charconv>
#include <stdexcept>

#include "protocol/limits.hpp"

namespace muster {

std::vector<int64_t> parse_device_list(const std::string& s) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    int64_t v = -1;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v < 0 ||
        v >= static_cast<int64_t>(limits::kMaxDevices))
      throw std::runtime_error("bad device index '" + item + "' in device list '" + s +
                               "' (expected e.g. 0,1,4,6)");
    out.push_back(v);
    start = end + 1;
  }
  return out;
}

}  // namespace muster
