#include "device_list.hpp"

#include <algorithm>
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

std::vector<int64_t> visible_devices(const std::string& cvd,
                                     const std::vector<std::string>& uuids) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start < cvd.size()) {
    size_t end = std::min(cvd.find(',', start), cvd.size());
    std::string item = cvd.substr(start, end - start);
    start = end + 1;
    int64_t found = -1;
    int64_t v = -1;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (!item.empty() && ec == std::errc() && p == item.data() + item.size()) {
      if (v >= 0 && v < static_cast<int64_t>(uuids.size())) found = v;
    } else if (!item.empty()) {
      // A UUID, or a prefix of exactly one.
      for (size_t i = 0; i < uuids.size(); ++i)
        if (!uuids[i].empty() && uuids[i].compare(0, item.size(), item) == 0) {
          if (found >= 0) return out;  // ambiguous: CUDA stops here too
          found = static_cast<int64_t>(i);
        }
    }
    if (found < 0 || std::find(out.begin(), out.end(), found) != out.end()) return out;
    out.push_back(found);
  }
  return out;
}

int64_t visible_ordinal(const std::vector<int64_t>& visible, int64_t device) {
  auto it = std::find(visible.begin(), visible.end(), device);
  return it == visible.end() ? -1 : it - visible.begin();
}

}  // namespace muster
