#include "core/devices.hpp"

#include <algorithm>

#include "gpu/placement.hpp"
#include "muster/error.hpp"

namespace muster::daemon {

namespace {
// "quarantined: WHY" or "drained: WHY", or "" for a GPU that may be leased.
std::string not_leasable(const DeviceSlot& s) {
  if (!s.quarantined().empty()) return "quarantined: " + s.quarantined();
  if (!s.drain.empty()) return "drained: " + s.drain;
  return "";
}
}  // namespace

std::string device_list(const std::vector<int64_t>& v) {
  std::string s;
  for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

DeviceLeases::DeviceLeases(std::vector<gpu::Device> allowed) {
  for (auto& d : allowed) slots_.push_back({std::move(d), "", 0});
}

std::vector<int64_t> DeviceLeases::pick(const std::string& job, size_t n, bool wants_gpu,
                                        const std::vector<int64_t>& subset,
                                        const std::function<std::string(uint32_t)>& foreign) const {
  std::vector<int64_t> out(n, -1);
  if (!subset.empty()) {
    if (slots_.empty())
      throw Error(ErrorCode::kNoDevice, "job '" + job + "' asks for devices " +
                                            device_list(subset) +
                                            " but this daemon hands out no GPUs");
    for (auto d : subset) {
      if (!hands_out(d))
        throw Error(ErrorCode::kInvalidArgument,
                    "device " + std::to_string(d) + " is not among the GPUs this daemon hands out");
      if (wants_gpu)
        for (const auto& s : slots_)
          if (std::string why = not_leasable(s); s.device.index == d && !why.empty())
            throw Error(ErrorCode::kNoDevice, "job '" + job + "' asks for GPU " +
                                                  std::to_string(d) + ", which is " + why);
    }
  }
  // CPU jobs, and nodes without GPUs, get no device rather than an error.
  if (!wants_gpu || slots_.empty()) return out;
  std::vector<const gpu::Device*> free, held;
  std::string busy;
  for (const auto& s : slots_) {
    // A rank joining a job that runs is placed near the job's other GPUs.
    if (s.job == job) held.push_back(&s.device);
    if (!subset.empty() && std::find(subset.begin(), subset.end(), s.device.index) == subset.end())
      continue;
    // A quarantined GPU (health, MIG, a failure) or a drained one is never
    // handed out.
    if (std::string why = not_leasable(s); !why.empty()) {
      busy += (busy.empty() ? "" : "; ") + std::string("GPU ") + std::to_string(s.device.index) +
              " is " + why;
      continue;
    }
    if (!s.job.empty()) {
      busy += (busy.empty() ? "" : "; ") + std::string("GPU ") + std::to_string(s.device.index) +
              " is leased to job '" + s.job + "' local rank " + std::to_string(s.local_rank);
      continue;
    }
    if (std::string f = foreign ? foreign(s.device.index) : ""; !f.empty()) {
      busy += (busy.empty() ? "" : "; ") + std::string("GPU ") + std::to_string(s.device.index) +
              " runs " + f;
      continue;
    }
    free.push_back(&s.device);
  }
  // By index, as placement's last tie-break wants (a daemon's --devices
  // may list its GPUs in any order).
  std::sort(free.begin(), free.end(), [](auto* a, auto* b) { return a->index < b->index; });
  size_t got = std::min(free.size(), n);
  if (got == n) {
    auto chosen = gpu::place(free, n, held);
    std::copy(chosen.begin(), chosen.end(), out.begin());
  }
  if (got < n)
    throw Error(ErrorCode::kNoDevice, "job '" + job + "' needs " + std::to_string(n) +
                                          " GPU(s) but only " + std::to_string(got) +
                                          " of the allowed ones are free" +
                                          (busy.empty() ? "" : " (" + busy + ")") +
                                          "; a GPU is never shared between ranks");
  return out;
}

void DeviceLeases::lease(const std::string& job, uint32_t local_rank, int64_t device) {
  if (device < 0) return;
  for (auto& s : slots_)
    if (s.device.index == device) {
      s.job = job;
      s.local_rank = local_rank;
    }
}

void DeviceLeases::release(const std::string& job, uint32_t local_rank, int64_t device) {
  if (device < 0) return;
  for (auto& s : slots_)
    if (s.device.index == device && s.job == job && s.local_rank == local_rank) s.job.clear();
}

const DeviceSlot* DeviceLeases::quarantine(int64_t device, const std::string& why) {
  for (auto& s : slots_)
    if (s.device.index == device) {
      if (s.quarantined().empty()) s.failure = why;
      return &s;
    }
  return nullptr;
}

const DeviceSlot& DeviceLeases::set_drain(int64_t device, const std::string& why) {
  for (auto& s : slots_)
    if (s.device.index == device) {
      s.drain = why;
      if (why.empty()) s.failure.clear();
      return s;
    }
  throw Error(ErrorCode::kInvalidArgument,
              "GPU " + std::to_string(device) + " is not among the GPUs this daemon hands out");
}

std::vector<DeviceMark> DeviceLeases::marks() const {
  std::vector<DeviceMark> out;
  for (const auto& s : slots_)
    if (!s.drain.empty() || !s.failure.empty())
      out.push_back({s.device.index, s.device.uuid, s.drain, s.failure});
  return out;
}

void DeviceLeases::restore(const std::vector<DeviceMark>& marks) {
  for (const auto& m : marks)
    for (auto& s : slots_)
      // By UUID where the GPU has one: the GPU at an index may have been
      // replaced, and the mark belongs to the one it was put on.
      if (m.uuid.empty() || s.device.uuid.empty() ? s.device.index == m.index
                                                  : s.device.uuid == m.uuid) {
        s.drain = m.drain;
        s.failure = m.failure;
      }
}

bool DeviceLeases::hands_out(int64_t device) const {
  return std::any_of(slots_.begin(), slots_.end(),
                     [&](const DeviceSlot& s) { return s.device.index == device; });
}

}  // namespace muster::daemon
