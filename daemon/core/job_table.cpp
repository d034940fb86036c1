// Jobs, slots and GPU leases: the bookkeeping that must never hand one GPU
// to two ranks.
#include "core/job_table.hpp"

#include "core/reply.hpp"
#include "log.hpp"

namespace muster::daemon {

namespace {
// The local rank a joining process gets, and whether it takes a free slot
// (true) or one that is already its own (false). A requested local rank is
// that slot: ours already (registered by muster run, or joined before) or
// free. Several ranks may share one pid (threads). Without a request, a slot
// this pid holds wins, else the lowest free one.
std::pair<uint32_t, bool> choose_slot(const Job& job, const proto::Join& m) {
  auto usable = [&](int64_t i) { return !slot_live(job.slots[i].state); };
  // A worker may be a wrapper (shell, `conda run`) whose child joins: the
  // slot is ours when its registered pid is the caller or an ancestor.
  auto ours = [&](int64_t i) {
    const Slot& s = job.slots[i];
    return slot_live(s.state) &&
           (s.pid == m.pid || s.joined_pid == m.pid ||
            (s.state == SlotState::kRunning && PidWatch::is_ancestor(s.pid, m.pid)));
  };
  if (m.local_rank >= 0) {
    auto r = static_cast<uint32_t>(m.local_rank);
    if (ours(m.local_rank)) return {r, false};
    if (usable(m.local_rank)) return {r, true};
    throw Error(ErrorCode::kConflict, "local rank " + std::to_string(m.local_rank) + " of job '" +
                                          m.job + "' is already held by pid " +
                                          std::to_string(job.slots[m.local_rank].pid));
  }
  for (uint32_t i = 0; i < job.local_world_size; ++i)
    if (ours(i)) return {i, false};
  for (uint32_t i = 0; i < job.local_world_size; ++i)
    if (usable(i)) return {i, true};
  throw Error(ErrorCode::kConflict, "job '" + m.job + "' already has all " +
                                        std::to_string(job.local_world_size) +
                                        " local rank(s) taken");
}

}  // namespace

JobTable::JobTable(std::vector<gpu::Device> allowed_devices, PidWatch& watch)
    : devices_(std::move(allowed_devices)), watch_(watch) {}

Job* JobTable::find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

const Job* JobTable::find(const std::string& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

Job& JobTable::get(const std::string& id) {
  if (Job* j = find(id)) return *j;
  throw Error(ErrorCode::kUnknownJob, "no job '" + id + "' on this daemon");
}

const Job& JobTable::get(const std::string& id) const {
  if (const Job* j = find(id)) return *j;
  throw Error(ErrorCode::kUnknownJob, "no job '" + id + "' on this daemon");
}

void JobTable::release(Job& job, uint32_t local_rank) {
  auto& slot = job.slots[local_rank];
  devices_.release(job.id, local_rank, slot.device);
  slot.device = -1;
}

proto::Reserved JobTable::reserve(const proto::Reserve& m, int64_t owner_uid) {
  if (auto it = jobs_.find(m.job); it != jobs_.end())
    throw Error(ErrorCode::kConflict, "job '" + m.job + "' already runs on this daemon with " +
                                          std::to_string(it->second.local_world_size) +
                                          " local rank(s); pick another --job-id");
  check_jobs_quota(owner_uid);
  auto devices = devices_.pick(m.job, m.local_world_size, m.wants_gpu, m.devices, foreign_test());
  if (!watch_.watch(m.launcher_pid))
    throw Error(ErrorCode::kInvalidArgument,
                "launcher pid " + std::to_string(m.launcher_pid) + " is not a running process");
  Job job;
  job.id = m.job;
  job.owner_uid = owner_uid;
  job.local_world_size = m.local_world_size;
  job.wants_gpu = m.wants_gpu;
  job.generation = m.generation;  // muster run's restart count
  job.launcher_pid = m.launcher_pid;
  job.slots.resize(m.local_world_size);
  for (uint32_t i = 0; i < m.local_world_size; ++i) {
    job.slots[i] = {SlotState::kReserved, m.launcher_pid, 0, devices[i]};
    devices_.lease(m.job, i, devices[i]);
  }
  // One watch per slot: the launcher's pid counts once for each.
  for (uint32_t i = 1; i < m.local_world_size; ++i) watch_.watch(m.launcher_pid);
  log::info(log::job(m.job), "job=" + m.job + " reserved " + std::to_string(m.local_world_size) +
                                 " slot(s) for launcher pid=" + std::to_string(m.launcher_pid) +
                                 " devices=[" + device_list(devices) +
                                 "] generation=" + std::to_string(m.generation) +
                                 " uid=" + std::to_string(owner_uid));
  jobs_.emplace(m.job, std::move(job));
  ++changes_;
  return {m.generation, devices};
}

void JobTable::check_jobs_quota(int64_t owner_uid) const {
  if (owner_uid < 0 || jobs_per_uid_ == 0) return;
  uint64_t owned = 0;
  for (const auto& [id, job] : jobs_) owned += job.owner_uid == owner_uid;
  if (owned >= jobs_per_uid_)
    throw Error(ErrorCode::kQuotaExceeded,
                "uid " + std::to_string(owner_uid) + " owns " + std::to_string(owned) +
                    " jobs on this daemon, its quota of " + std::to_string(jobs_per_uid_) +
                    " jobs per uid; nothing was changed (end a job, or raise the quota with "
                    "musterd --max-jobs-per-uid, 0 = no limit)");
}

void JobTable::restore(Job job) {
  for (uint32_t r = 0; r < job.local_world_size; ++r) {
    int64_t d = job.slots[r].device;
    if (d < 0) continue;
    if (!devices_.hands_out(d))
      log::warning(log::job(job.id, r, d), "job=" + job.id + " rank=" + std::to_string(r) +
                                               " keeps device " + std::to_string(d) +
                                               ", which this musterd does not hand out");
    devices_.lease(job.id, r, d);
  }
  std::string id = job.id;
  jobs_.emplace(std::move(id), std::move(job));
  ++changes_;
}

void JobTable::attach(const proto::Attach& m) {
  Job& job = get(m.job);
  if (m.pids.size() != job.local_world_size)
    throw Error(ErrorCode::kInvalidArgument,
                "attach gives " + std::to_string(m.pids.size()) + " pid(s) for job '" + m.job +
                    "' of " + std::to_string(job.local_world_size) + " local rank(s)");
  for (uint32_t i = 0; i < job.local_world_size; ++i)
    if (job.slots[i].state != SlotState::kReserved)
      throw Error(ErrorCode::kConflict, "local rank " + std::to_string(i) + " of job '" + m.job +
                                            "' is " + slot_state_name(job.slots[i].state) +
                                            ", not reserved");
  // Watch every pid first so that a dead one refuses the whole request.
  for (size_t i = 0; i < m.pids.size(); ++i) {
    if (!watch_.watch(m.pids[i])) {
      for (size_t k = 0; k < i; ++k) watch_.unwatch(m.pids[k]);
      throw Error(ErrorCode::kInvalidArgument,
                  "worker pid " + std::to_string(m.pids[i]) + " is not a running process");
    }
  }
  for (uint32_t i = 0; i < job.local_world_size; ++i) {
    watch_.unwatch(job.slots[i].pid);  // the launcher's hold on this slot
    job.slots[i].pid = m.pids[i];
    job.slots[i].state = SlotState::kRunning;
    log::info(log::job(m.job, i, job.slots[i].device),
              "job=" + m.job + " rank=" + std::to_string(i) + " pid=" + std::to_string(m.pids[i]) +
                  " device=" + std::to_string(job.slots[i].device) + " registered");
  }
  job.numa_binding = m.numa_binding;
}

proto::RankInfo JobTable::join(const proto::Join& m, int64_t owner_uid,
                               const std::vector<int64_t>& allowed) {
  auto it = jobs_.find(m.job);
  bool created = it == jobs_.end();
  if (!created && it->second.local_world_size != m.local_world_size)
    throw Error(ErrorCode::kConflict, "job '" + m.job + "' has " +
                                          std::to_string(it->second.local_world_size) +
                                          " local rank(s), but this process asks for " +
                                          std::to_string(m.local_world_size));
  Job fresh;
  Job& job = created ? fresh : it->second;
  if (created) {
    check_jobs_quota(owner_uid);
    job.id = m.job;
    job.owner_uid = owner_uid;
    job.local_world_size = m.local_world_size;
    job.wants_gpu = m.wants_gpu;
    job.slots.resize(m.local_world_size);
  }
  auto [chosen, takes_free] = choose_slot(job, m);
  auto r = chosen;
  if (takes_free) {
    int64_t device = devices_.pick(m.job, 1, m.wants_gpu, allowed, foreign_test())[0];
    if (!watch_.watch(m.pid))
      throw Error(ErrorCode::kInvalidArgument,
                  "pid " + std::to_string(m.pid) + " is not a running process");
    job.slots[r] = {SlotState::kJoined, m.pid, m.pid, device};
    devices_.lease(m.job, r, device);
  } else {
    job.slots[r].state = SlotState::kJoined;
    job.slots[r].joined_pid = m.pid;
  }
  log::info(log::job(m.job, r, job.slots[r].device),
            "job=" + m.job + " rank=" + std::to_string(r) + " pid=" + std::to_string(m.pid) +
                " device=" + std::to_string(job.slots[r].device) + " joined");
  proto::RankInfo info;
  info.job = m.job;
  info.rank = r;
  info.local_rank = r;
  info.world_size = job.world_size();
  if (job.cluster) {
    info.rank = job.cluster->rank_offset + r;
    info.node_rank = job.cluster->node_rank;
    info.num_nodes = job.cluster->num_nodes;
  }
  info.local_world_size = job.local_world_size;
  info.device = job.slots[r].device;
  for (const auto& d : devices_.slots())
    if (static_cast<int64_t>(d.device.index) == info.device) info.device_uuid = d.device.uuid;
  info.generation = job.generation;
  if (created) jobs_.emplace(m.job, std::move(fresh)), ++changes_;
  return info;
}

Job& JobTable::held_by(const std::string& id, uint32_t local_rank, int64_t pid) {
  Job& job = get(id);
  if (local_rank >= job.local_world_size || job.slots[local_rank].pid != pid ||
      !slot_live(job.slots[local_rank].state))
    throw Error(ErrorCode::kInvalidArgument,
                "pid " + std::to_string(pid) + " holds no local rank " +
                    std::to_string(local_rank) + " in job '" + id + "'");
  return job;
}

void JobTable::end_slot(Job& job, uint32_t r, const char* why) {
  log::info(log::job(job.id, r, job.slots[r].device),
            "job=" + job.id + " rank=" + std::to_string(r) +
                " pid=" + std::to_string(job.slots[r].pid) + " " + why + "; device " +
                std::to_string(job.slots[r].device) + " released");
  release(job, r);
  job.slots[r].state = SlotState::kExited;
}

Job* JobTable::finished(const std::string& id) {
  Job* job = find(id);
  return job && !job->live() ? job : nullptr;
}

}  // namespace muster::daemon
