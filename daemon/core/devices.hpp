// The GPUs a daemon hands out and who holds each: the table that must never
// give one GPU to two ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpu/inventory.hpp"

namespace muster::daemon {

struct DeviceSlot {
  gpu::Device device;
  std::string job;  // holder, empty when free
  uint32_t local_rank = 0;
  // Root drained it (muster gpu drain): why. Its holder keeps it; nobody
  // is given it after. Saved with the state.
  std::string drain{};
  // A critical XID while a daemon ran: why. Also saved: the GPU needs a
  // reset, which the next daemon cannot see. Undrain forgets it.
  std::string failure{};
  // Why it is quarantined (health at discovery, else a failure); "" if not.
  const std::string& quarantined() const {
    return device.quarantine.empty() ? failure : device.quarantine;
  }
};

// What of a GPU survives a restart besides its lease: a drain and a
// failure, found again by UUID (by index where there is none).
struct DeviceMark {
  int64_t index = 0;
  std::string uuid;
  std::string drain;
  std::string failure;
  bool operator==(const DeviceMark&) const = default;
};

// "0,2,3": device indices as logs and errors show them.
std::string device_list(const std::vector<int64_t>& v);

// Who runs on the GPUs now, asked at lease time: the server's comes from
// NVML and /proc; the fuzzer and unit tests have none (nothing is foreign).
struct GpuUse {
  std::function<std::vector<int64_t>(uint32_t index)> pids;  // compute processes
  std::function<int64_t(int64_t pid)> parent;                // 0 when gone
  // The id of the job whose cgroup holds pid ("" when none, or no cgroups).
  std::function<std::string(int64_t pid)> job_of;
  bool refuse = true;  // --foreign-gpu-use refuse (else warn)
};

class DeviceLeases {
 public:
  explicit DeviceLeases(std::vector<gpu::Device> allowed);

  // A device for each of n ranks of `job`, from `subset` when it is not
  // empty: -1 each for CPU jobs and on a daemon without GPUs. Throws
  // Error(kNoDevice) when too few are free, Error(kInvalidArgument) for a
  // subset device this daemon does not hand out. Changes nothing.
  // foreign(index): why another program holds the GPU ("" = nobody).
  std::vector<int64_t> pick(const std::string& job, size_t n, bool wants_gpu,
                            const std::vector<int64_t>& subset,
                            const std::function<std::string(uint32_t)>& foreign = {}) const;
  // Gives device (-1: none) to the job's local rank.
  void lease(const std::string& job, uint32_t local_rank, int64_t device);
  // Takes device back from the job's local rank, if that rank holds it.
  void release(const std::string& job, uint32_t local_rank, int64_t device);
  bool hands_out(int64_t device) const;
  // Never leases `device` again (a failed GPU); returns the slot, if any.
  const DeviceSlot* quarantine(int64_t device, const std::string& why);
  // Drains `device` for `why`, or undrains it (and forgets a failure) when
  // why is empty. Throws Error(kInvalidArgument) for a device not handed
  // out here.
  const DeviceSlot& set_drain(int64_t device, const std::string& why);
  // The drains and failures, for the state file, and putting them back.
  std::vector<DeviceMark> marks() const;
  void restore(const std::vector<DeviceMark>& marks);
  // Every allowed device, in the order given, held or not.
  const std::vector<DeviceSlot>& slots() const { return slots_; }

 private:
  std::vector<DeviceSlot> slots_;
};

}  // namespace muster::daemon
