// The jobs of this daemon and their slots, with the GPU leases they hold:
// the table that must never hand one GPU to two ranks. It creates, finds and
// removes jobs and moves slots between states; what a change means for
// waits, stores and peers is the caller's (State's) business.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/devices.hpp"
#include "jobs/job.hpp"
#include "liveness/pidwatch.hpp"
#include "protocol/messages.hpp"

namespace muster::daemon {

class JobTable {
 public:
  using Map = std::map<std::string, Job>;

  JobTable(std::vector<gpu::Device> allowed_devices, PidWatch& watch);

  const Map& all() const { return jobs_; }
  Map::iterator begin() { return jobs_.begin(); }
  Map::iterator end() { return jobs_.end(); }
  Map::const_iterator begin() const { return jobs_.begin(); }
  Map::const_iterator end() const { return jobs_.end(); }
  size_t size() const { return jobs_.size(); }
  const DeviceLeases& devices() const { return devices_; }
  DeviceLeases& devices() { return devices_; }
  // Foreign use of GPUs (GpuUse); without one, nothing is foreign.
  void set_gpu_use(GpuUse use) { gpu_use_ = std::move(use); }
  // "pid N, which muster did not start" for the first compute process on
  // GPU `index` that is neither a rank nor a descendant of one; "" if none.
  std::string foreign_user(uint32_t index) const;
  bool refuses_foreign() const { return gpu_use_.refuse; }
  // How many jobs one uid may own (0 = no limit); reserve and join refuse
  // a new job over it with quota_exceeded, restore never does.
  void set_jobs_per_uid(uint64_t n) { jobs_per_uid_ = n; }

  Job* find(const std::string& id);
  const Job* find(const std::string& id) const;
  // Throws Error(kUnknownJob) when there is no such job.
  Job& get(const std::string& id);
  const Job& get(const std::string& id) const;

  // The requests that create jobs or fill their slots; owner_uid: the uid a
  // job created here belongs to (-1 = none). Each validates before it
  // mutates: a refused request changes nothing.
  proto::Reserved reserve(const proto::Reserve& m, int64_t owner_uid);
  // allowed: the GPUs a rank that takes a free slot may lease (empty = any).
  proto::RankInfo join(const proto::Join& m, int64_t owner_uid,
                       const std::vector<int64_t>& allowed = {});
  void attach(const proto::Attach& m);
  // Takes a job back as the state file saved it, its slots' devices leased
  // again (a device this daemon no longer hands out stays with its rank).
  void restore(Job job);

  // The job whose local rank `pid` holds (a Leave); throws otherwise.
  Job& held_by(const std::string& id, uint32_t local_rank, int64_t pid);
  // The slot's process is gone: its device back, the slot exited.
  void end_slot(Job& job, uint32_t local_rank, const char* why);
  // Calls f(job, local_rank) for every live slot `pid` holds.
  template <class F>
  void each_live_slot_of(int64_t pid, F&& f) {
    for (auto& [id, job] : jobs_)
      for (uint32_t i = 0; i < job.local_world_size; ++i)
        if (job.slots[i].pid == pid && slot_live(job.slots[i].state)) f(job, i);
  }
  // The job, if it exists and none of its slots is live any more.
  Job* finished(const std::string& id);
  void erase(const std::string& id) { jobs_.erase(id), ++changes_; }
  // Jobs made or erased so far: tells a count of the jobs' holdings
  // (State::holdings) that it is out of date.
  uint64_t changes() const { return changes_; }

 private:
  uint64_t changes_ = 0;
  // Throws quota_exceeded when owner_uid already owns its quota of jobs.
  void check_jobs_quota(int64_t owner_uid) const;
  // Gives the rank's device back and forgets it in the slot.
  void release(Job& job, uint32_t local_rank);

  // pick()'s foreign test: refuses, or only warns, as configured.
  std::function<std::string(uint32_t)> foreign_test() const;

  DeviceLeases devices_;
  GpuUse gpu_use_;
  Map jobs_;
  PidWatch& watch_;
  uint64_t jobs_per_uid_ = 0;
};

}  // namespace muster::daemon
