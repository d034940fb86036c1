// What makes a GPU unfit to lease, as NVML reports it: the checks NVIDIA's
// own guidance for GPU health names (volatile uncorrectable ECC errors,
// pending page retirement, a failed row remap, a GPU that fell off the
// bus), plus MIG mode, which muster does not lease into. And the XID events
// a watcher thread waits for.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

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
  return why;
}

bool Nvml::open_events() {
  if (!ok_ || !ev_create_ || !ev_register_ || !ev_wait_ || !ev_free_) return false;
  if (ev_create_(&events_) != NVML_SUCCESS) return false;
  unsigned n = count();
  for (unsigned i = 0; i < n; ++i)
    if (nvmlDevice_t dev = handle(i))
      ev_register_(dev, nvmlEventTypeXidCriticalError, events_);  // some GPUs cannot
  return true;
}

std::optional<std::pair<unsigned, unsigned long long>> Nvml::wait_event(unsigned timeout_ms) const {
  if (!events_) return std::nullopt;
  nvmlEventData_t data{};
  if (ev_wait_(events_, &data, timeout_ms) != NVML_SUCCESS) return std::nullopt;
  if (!(data.eventType & nvmlEventTypeXidCriticalError)) return std::nullopt;
  unsigned n = count();
  for (unsigned i = 0; i < n; ++i)
    if (handle(i) == data.device) return std::make_pair(i, data.eventData);
  return std::nullopt;
}

std::shared_ptr<Nvml> load_nvml(std::vector<Device>& out) {
  const char* env = std::getenv("MUSTER_NVML_LIBRARY");
  auto nvml = std::make_shared<Nvml>(env && *env ? env : "libnvidia-ml.so.1");
  if (!nvml->ok()) {
    if (env && *env) log::warning("MUSTER_NVML_LIBRARY: " + nvml->why());
    return nullptr;
  }
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
