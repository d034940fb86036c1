#include "device_list.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "protocol/limits.hpp"
#include "split.hpp"

namespace muster {

std::vector<int64_t> parse_device_list(const std::string& s) {
  std::vector<int64_t> out;
  for (const auto& item : split(s)) {
    int64_t v = -1;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v < 0 ||
        v >= static_cast<int64_t>(limits::kMaxDevices))
      throw std::runtime_error("bad device index '" + item + "' in device list '" + s +
                               "' (expected e.g. 0,1,4,6)");
    out.push_back(v);
  }
  return out;
}

std::vector<int64_t> visible_devices(const std::string& cvd, const std::vector<std::string>& uuids,
                                     const std::vector<int64_t>& seen) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start < cvd.size()) {
    size_t end = std::min(cvd.find(',', start), cvd.size());
    std::string item = cvd.substr(start, end - start);
    start = end + 1;
    if (item.rfind("MIG-", 0) == 0)
      throw std::runtime_error("CUDA_VISIBLE_DEVICES='" + cvd + "' names a MIG instance (" + item +
                               "): muster leases whole GPUs only; name GPUs by index or GPU-… "
                               "UUID, or start the job without muster's GPU lease (--cpu)");
    int64_t found = -1;
    int64_t v = -1;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (!item.empty() && ec == std::errc() && p == item.data() + item.size()) {
      // CUDA counts the devices it sees, not NVML's.
      if (v >= 0 && v < static_cast<int64_t>(seen.size())) found = seen[static_cast<size_t>(v)];
    } else if (!item.empty()) {
      // A UUID, or a prefix of exactly one of the GPUs CUDA sees.
      for (int64_t i : seen)
        if (i >= 0 && static_cast<size_t>(i) < uuids.size() && !uuids[i].empty() &&
            uuids[i].compare(0, item.size(), item) == 0) {
          if (found >= 0) return out;  // ambiguous: CUDA stops here too
          found = i;
        }
    }
    if (found < 0 || std::find(out.begin(), out.end(), found) != out.end()) return out;
    out.push_back(found);
  }
  return out;
}

namespace {

std::string sysroot() {
  const char* r = std::getenv("MUSTER_TEST_SYSROOT");
  return r && *r ? r : "";
}

// The driver's minor number for the GPU at `bus` (NVML's spelling), from
// /proc/driver/nvidia/gpus/0000:3b:00.0/information ("Device Minor: 0");
// -1 when it says none.
int64_t device_minor(const std::string& root, const std::string& bus) {
  unsigned domain = 0, b = 0, dev = 0, fn = 0;
  if (std::sscanf(bus.c_str(), "%x:%x:%x.%x", &domain, &b, &dev, &fn) != 4) return -1;
  char name[32];
  std::snprintf(name, sizeof name, "%04x:%02x:%02x.%x", domain, b, dev, fn);
  std::ifstream f(root + "/proc/driver/nvidia/gpus/" + name + "/information");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("Device Minor:", 0) != 0) continue;
    int64_t minor = -1;
    std::string rest = line.substr(13);
    size_t at = rest.find_first_not_of(" \t");
    if (at == std::string::npos) return -1;
    auto [p, ec] = std::from_chars(rest.data() + at, rest.data() + rest.size(), minor);
    return ec == std::errc() && minor >= 0 && minor < 4096 ? minor : -1;
  }
  return -1;
}

}  // namespace

bool lost_reason(const std::string& reason) {
  return reason.rfind(kLostReasonPrefix, 0) == 0;
}

std::vector<int64_t> cuda_devices(const std::vector<SeenGpu>& gpus) {
  std::vector<int64_t> all, open;
  for (size_t i = 0; i < gpus.size(); ++i)
    if (!gpus[i].lost) all.push_back(static_cast<int64_t>(i));
  std::string root = sysroot();
  struct stat st {};
  if (::stat((root + "/proc/driver/nvidia/gpus").c_str(), &st) != 0) return all;
  // Simulated GPUs, or a source without bus ids: nothing to look up.
  for (const auto& g : gpus)
    if (g.pci_bus_id.empty()) return all;
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (gpus[i].lost) continue;
    // A GPU whose /proc entry a container hides, or whose device node a
    // cgroup refuses (EPERM) or a container leaves out (ENOENT), is one
    // CUDA does not enumerate here.
    int64_t minor = device_minor(root, gpus[i].pci_bus_id);
    if (minor < 0) continue;
    int fd = ::open((root + "/dev/nvidia" + std::to_string(minor)).c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;
    ::close(fd);
    open.push_back(static_cast<int64_t>(i));
  }
  return open;
}

std::optional<std::vector<int64_t>> visible_gpus(const char* cvd,
                                                 const std::vector<SeenGpu>& gpus) {
  if (gpus.empty()) return std::nullopt;
  std::vector<int64_t> seen = cuda_devices(gpus);
  if (!cvd) {
    if (seen.size() == gpus.size()) return std::nullopt;  // every GPU, in NVML's order
    return seen;
  }
  std::vector<std::string> uuids;
  for (const auto& g : gpus) uuids.push_back(g.uuid);
  return visible_devices(cvd, uuids, seen);
}

int64_t visible_ordinal(const std::vector<int64_t>& visible, int64_t device) {
  auto it = std::find(visible.begin(), visible.end(), device);
  return it == visible.end() ? -1 : it - visible.begin();
}

std::string gpu_uuid_text(const char (&bytes)[16]) {
  static const int groups[] = {4, 2, 2, 2, 6};
  std::string out = "GPU";
  size_t at = 0;
  char hex[3];
  for (int g : groups) {
    out += '-';
    for (int i = 0; i < g; ++i, ++at) {
      std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(bytes[at]));
      out += hex;
    }
  }
  return out;
}

}  // namespace muster
