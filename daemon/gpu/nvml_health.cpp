// What makes a GPU unfit to lease, as NVML reports it: the checks NVIDIA's
// own guidance for GPU health names (volatile uncorrectable ECC errors,
// pending page retirement, a failed row remap, a GPU that fell off the
// bus), plus MIG mode, which muster does not lease into. And the XID events
// a watcher thread waits for.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>

#include "gpu/nvml.hpp"
#include "log.hpp"

namespace muster::gpu {

std::string Nvml::problem(unsigned index) const {
  nvmlDevice_t dev = nullptr;
  nvmlReturn_t r = handle_(index, &dev);
  if (r == NVML_ERROR_GPU_IS_LOST) return "lost: the GPU fell off the bus (NVML_ERROR_GPU_IS_LOST)";
  if (r != NVML_SUCCESS) return "NVML cannot open it (error " + std::to_string(r) + ")";
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  if (name_(dev, name, sizeof name) == NVML_ERROR_GPU_IS_LOST)
    return "lost: the GPU fell off the bus (NVML_ERROR_GPU_IS_LOST)";
  std::string why;
  auto add = [&](const std::string& s) { why += (why.empty() ? "" : "; ") + s; };
  unsigned long long ecc = 0;
  if (ecc_ &&
      ecc_(dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &ecc) == NVML_SUCCESS &&
      ecc > 0)
    add(std::to_string(ecc) + " volatile uncorrectable ECC error(s)");
  nvmlEnableState_t pending = NVML_FEATURE_DISABLED;
  if (retired_ && retired_(dev, &pending) == NVML_SUCCESS && pending == NVML_FEATURE_ENABLED)
    add("retired pages pending (reset the GPU)");
  unsigned corr = 0, unc = 0, remap_pending = 0, failed = 0;
  if (remapped_ && remapped_(dev, &corr, &unc, &remap_pending, &failed) == NVML_SUCCESS) {
    if (failed)
      add("row remapping failed");
    else if (remap_pending)
      add("row remapping pending (reset the GPU)");
  }
  unsigned cur = 0, next = 0;
  if (mig_ && mig_(dev, &cur, &next) == NVML_SUCCESS && cur == NVML_DEVICE_MIG_ENABLE)
    add("MIG mode is enabled (muster leases whole GPUs only)");
  if (std::string action = recovery_action(dev); !action.empty()) add(action);
  return why;
}

// The driver's own verdict (nvml.h: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
// drivers since r570), in addition to the checks above: "" when it asks
// for nothing, or does not say (an older driver without
// nvmlDeviceGetFieldValues, or without the field: "not reported").
std::string Nvml::recovery_action(nvmlDevice_t dev) const {
  if (!fields_) return "";
  nvmlFieldValue_t v{};
  v.fieldId = NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
  if (fields_(dev, 1, &v) != NVML_SUCCESS || v.nvmlReturn != NVML_SUCCESS) return "";
  switch (static_cast<int>(v.value.uiVal)) {
    case NVML_GPU_RECOVERY_ACTION_NONE:
      return "";
    case NVML_GPU_RECOVERY_ACTION_GPU_RESET:
      return "the driver asks for a GPU reset (recovery action GPU_RESET)";
    case NVML_GPU_RECOVERY_ACTION_NODE_REBOOT:
      return "the driver asks for a node reboot (recovery action NODE_REBOOT)";
    case NVML_GPU_RECOVERY_ACTION_DRAIN_P2P:
      return "the driver asks to drain peer-to-peer traffic (recovery action DRAIN_P2P)";
    case NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET:
      return "the driver asks to drain and reset the GPU (recovery action DRAIN_AND_RESET)";
    default:
      return "the driver asks for recovery action " + std::to_string(v.value.uiVal);
  }
}

bool Nvml::lost(unsigned index) const {
  nvmlDevice_t dev = nullptr;
  nvmlReturn_t r = handle_(index, &dev);
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  return r == NVML_ERROR_GPU_IS_LOST ||
         (r == NVML_SUCCESS && name_(dev, name, sizeof name) == NVML_ERROR_GPU_IS_LOST);
}

bool Nvml::open_events(const std::vector<unsigned>& skip) {
  if (!ok_ || !ev_create_ || !ev_register_ || !ev_wait_ || !ev_free_) return false;
  if (events_) ev_free_(std::exchange(events_, nullptr));
  watched_ = 0;
  if (ev_create_(&events_) != NVML_SUCCESS) {
    events_ = nullptr;
    log::warning("NVML: no GPU is watched for XID events: nvmlEventSetCreate failed");
    return false;
  }
  unsigned n = count();
  said_unwatched_.resize(std::max<size_t>(said_unwatched_.size(), n));
  for (unsigned i = 0; i < n; ++i) {
    if (std::find(skip.begin(), skip.end(), i) != skip.end()) continue;
    std::string why = watch(i);
    if (why.empty()) {
      ++watched_;
    } else if (!said_unwatched_[i]) {
      said_unwatched_[i] = true;
      log::warning(log::gpu(i), "GPU " + std::to_string(i) + " is not watched for XID events: " +
                                    why + "; its failures are seen only at the next daemon start");
    }
  }
  return true;
}

namespace {
std::string error_text(nvmlReturn_t r) {
  return r == NVML_ERROR_GPU_IS_LOST     ? "the GPU is lost (NVML_ERROR_GPU_IS_LOST)"
         : r == NVML_ERROR_NOT_SUPPORTED ? "NVML_ERROR_NOT_SUPPORTED"
                                         : "error " + std::to_string(static_cast<int>(r));
}
}  // namespace

// Registers GPU `index` for the critical-XID events it supports; why not.
std::string Nvml::watch(unsigned index) {
  nvmlDevice_t dev = nullptr;
  if (nvmlReturn_t r = handle_(index, &dev); r != NVML_SUCCESS)
    return "NVML cannot open it (" + error_text(r) + ")";
  unsigned long long types = nvmlEventTypeXidCriticalError;
  if (ev_supported_) {
    // GeForce boards and many vGPU profiles have no XID events; asking for
    // them anyway registers nothing.
    if (nvmlReturn_t r = ev_supported_(dev, &types); r != NVML_SUCCESS)
      return "nvmlDeviceGetSupportedEventTypes failed (" + error_text(r) + ")";
    if (!(types & nvmlEventTypeXidCriticalError))
      return "the GPU does not support XID events (nvmlDeviceGetSupportedEventTypes)";
  }
  if (nvmlReturn_t r = ev_register_(dev, nvmlEventTypeXidCriticalError, events_); r != NVML_SUCCESS)
    return "nvmlDeviceRegisterEvents failed (" + error_text(r) + ")";
  return "";
}

Nvml::Event Nvml::wait_event(unsigned timeout_ms) const {
  Event e;
  if (!events_) return e;
  nvmlEventData_t data{};
  nvmlReturn_t r = ev_wait_(events_, &data, timeout_ms);
  if (r == NVML_ERROR_TIMEOUT) return e;
  if (r == NVML_ERROR_GPU_IS_LOST) {
    e.kind = Event::kLost;
    return e;
  }
  if (r != NVML_SUCCESS) {
    e.kind = Event::kError;
    e.error = r;
    return e;
  }
  if (!(data.eventType & nvmlEventTypeXidCriticalError)) return e;
  unsigned n = count();
  for (unsigned i = 0; i < n; ++i)
    if (handle(i) == data.device) {
      e.kind = Event::kXid;
      e.index = i;
      e.xid = data.eventData;
      return e;
    }
  return e;
}

std::shared_ptr<Nvml> load_nvml(std::vector<Device>& out) {
  const char* env = std::getenv("MUSTER_NVML_LIBRARY");
  auto nvml = std::make_shared<Nvml>(env && *env ? env : "libnvidia-ml.so.1");
  if (!nvml->ok()) {
    if (env && *env) log::warning("MUSTER_NVML_LIBRARY: " + nvml->why());
    return nullptr;
  }
  if (!nvml->reports_recovery())
    log::notice(
        "NVML has no nvmlDeviceGetFieldValues (a driver older than r570): the driver's "
        "recommended recovery action is not reported; ECC, row-remap and page-retirement "
        "checks still apply");
  unsigned n = nvml->count();
  for (unsigned i = 0; i < n; ++i) out.push_back(nvml->describe(i));
  nvml->fill_topology(out);
  return nvml;
}

}  // namespace muster::gpu

namespace muster::gpu {

std::vector<int64_t> compute_pids(const Nvml& nvml, unsigned index) {
  std::vector<int64_t> out;
  if (auto procs = nvml.processes(index))
    for (const auto& p : *procs) out.push_back(p.pid);
  return out;
}

int64_t parent_pid(int64_t pid) {
  // /proc/PID/stat: "pid (comm) state ppid …"; comm may hold spaces and
  // parentheses, so the fields are read after the last ')'.
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 1));
  std::string state;
  int64_t ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

}  // namespace muster::gpu
