// What the daemon says of itself (reports.hpp).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "core/reports.hpp"
#include "job_id.hpp"
#include "log.hpp"
#include "muster_config.h"
#include "protocol/limits.hpp"

namespace muster::daemon {

namespace {

// The CPUs a rank's process may run on, from the kernel (so it shows what
// pinned it: muster run's --numa-binding, taskset, a cgroup's cpuset); ""
// without a process or when the list is too long for the reply.
std::string cpus_allowed(int64_t pid) {
  if (pid <= 0) return "";
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%lld/status", static_cast<long long>(pid));
  FILE* f = std::fopen(path, "re");
  if (!f) return "";
  std::string cpus;
  // Long lines (Cpus_allowed's hex mask on large machines) come in pieces.
  char line[512];
  bool at_start = true;
  while (std::fgets(line, sizeof line, f)) {
    static const char kKey[] = "Cpus_allowed_list:";
    bool key = at_start && std::strncmp(line, kKey, sizeof kKey - 1) == 0;
    at_start = std::strchr(line, '\n') != nullptr;
    if (!key) continue;
    cpus = line + sizeof kKey - 1;
    while (!at_start && std::fgets(line, sizeof line, f)) {
      cpus += line;
      at_start = std::strchr(line, '\n') != nullptr;
    }
    break;
  }
  std::fclose(f);
  auto first = cpus.find_first_not_of(" \t\n");
  auto last = cpus.find_last_not_of(" \t\n");
  cpus = first == std::string::npos ? "" : cpus.substr(first, last - first + 1);
  return cpus.size() <= proto::kMaxCpusText ? cpus : "";
}

// Anyone may ask for status in a loop, and a node may run hundreds of
// ranks: each rank's /proc file is read at most once a second, whatever
// the rate of requests. Entries not asked for in a minute are dropped.
std::string cpus_of(int64_t pid, Clock::time_point now) {
  struct Entry {
    std::string cpus;
    Clock::time_point read, used;
  };
  static std::unordered_map<int64_t, Entry> cache;
  static Clock::time_point swept;
  if (now - swept > std::chrono::minutes(1)) {
    std::erase_if(cache,
                  [&](const auto& e) { return now - e.second.used > std::chrono::minutes(1); });
    swept = now;
  }
  auto [it, fresh] = cache.try_emplace(pid);
  if (fresh || now - it->second.read > std::chrono::seconds(1)) {
    it->second.cpus = cpus_allowed(pid);
    it->second.read = now;
  }
  it->second.used = now;
  return it->second.cpus;
}

// What parts of a status reply decode to, in msgpack objects (a map's
// keys and values, each list item), rounded up: a job's fields and its
// forming names (kMaxFormingNames), a rank, a wait and a rank it names.
// The reply stays under an eighth of the decoder's budget
// (kMaxFrameObjects); devices (at most kMaxDevices, ~40 objects each) take
// some of the rest. An eighth, not half: a reply is made in the loop, and
// half the budget (~37,000 ranks, 10 MB) held everyone else's requests
// 60 to 130 ms (tests/test_ceilings.cpp); 131,072 objects still hold the
// largest local job (4,096 ranks, ~57,000 objects) twice.
constexpr size_t kStatusObjects = limits::kMaxFrameObjects / 8;
constexpr size_t kJobObjects = 64 + 2 * proto::kMaxFormingNames;
constexpr size_t kRankObjects = 14;
constexpr size_t kWaitObjects = 18;
constexpr size_t kWaitRankObjects = 8;

// Whether status's job filter picks the job keyed `key`: by its name (for
// root, every owner's job of that name; for others, their own is the only
// one they see) or by its key (a node asking for its coordinator's waits).
bool status_names(const std::string& key, const std::string& only) {
  return key == only || job_name(key) == only;
}

}  // namespace

proto::StatusReply Reports::status(int64_t viewer, const std::string& only) const {
  if (!only.empty() && std::none_of(jobs_.begin(), jobs_.end(), [&](const auto& j) {
        return j.second.visible_to(viewer) && status_names(j.first, only);
      }))
    throw Error(ErrorCode::kUnknownJob, "no job '" + only + "' on this daemon");
  proto::StatusReply s;
  s.version = MUSTER_VERSION;
  s.pid = ::getpid();
  const auto now = Clock::now();
  s.uptime_s = std::chrono::duration<double>(now - started_).count();
  s.peer_requests = peer_requests_;
  s.containment = containment_;
  s.gpu_source = gpu_source_;
  for (const auto& d : jobs_.devices().slots()) {
    proto::DeviceStatus ds{d.device.index, d.device.name, "", -1, 0, !d.job.empty()};
    ds.uuid = d.device.uuid;
    ds.pci_bus_id = d.device.pci_bus_id;
    ds.numa_node = d.device.numa_node;
    ds.cpu_affinity = d.device.cpu_affinity;
    ds.nvlinks.assign(d.device.nvlinks.begin(), d.device.nvlinks.end());
    ds.paths.assign(d.device.paths.begin(), d.device.paths.end());
    ds.drain = d.drain;
    if (!d.quarantined().empty()) {
      ds.health = "quarantined";
      ds.reason = d.quarantined();
    } else if (!d.drain.empty()) {
      ds.health = "drained";
      ds.reason = "drained: " + d.drain;
    } else if (auto f = d.job.empty() ? jobs_.foreign_user(d.device.index) : ""; !f.empty()) {
      ds.health = "foreign_use";
      ds.reason =
          "runs " + f + (jobs_.refuses_foreign() ? ": not leased" : ": leased anyway (warn)");
    }
    // Another uid's GPU is only "in use": who holds it is theirs to know.
    if (const auto& job = d.job; !job.empty() && jobs_.all().at(job).visible_to(viewer)) {
      const auto& slot = jobs_.all().at(job).slots.at(d.local_rank);
      ds.job = job_name(job);
      ds.owner = jobs_.all().at(job).owner_uid;
      ds.rank = d.local_rank;
      ds.pid = slot.pid;
    }
    s.devices.push_back(std::move(ds));
  }
  status_jobs(s, viewer, only, now);
  return s;
}

// Bounded by construction: the reply must decode (limits.hpp's object
// budget) whatever other users run. The viewer's own jobs come first,
// then others' while the budget lasts; a job cut short says how many of
// its ranks and waits were left out, the reply how many jobs.
void Reports::status_jobs(proto::StatusReply& s, int64_t viewer, const std::string& only,
                          Clock::time_point now) const {
  // Others' jobs take turns by owner (each uid's first, then each uid's
  // second, ...): one user's many jobs cannot push out another's few.
  std::vector<std::pair<size_t, const Job*>> shown;
  std::unordered_map<int64_t, size_t> turn;
  for (const auto& [id, job] : jobs_)
    if (job.visible_to(viewer) && (only.empty() || status_names(id, only)))
      shown.emplace_back(job.owner_uid == viewer ? 0 : 1 + turn[job.owner_uid]++, &job);
  std::stable_sort(shown.begin(), shown.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  size_t budget = kStatusObjects;
  for (const auto& [order, jp] : shown) {
    const Job& job = *jp;
    const std::string& id = job.id;
    if (budget < kJobObjects) {
      ++s.jobs_left_out;
      continue;
    }
    budget -= kJobObjects;
    proto::JobStatus js{std::string(job_name(id)),
                        job.generation,
                        job.world_size(),
                        job.local_world_size,
                        {},
                        job.owner_uid};
    for (uint32_t i = 0; i < job.local_world_size; ++i) {
      if (budget < kRankObjects) {
        js.ranks_left_out = job.local_world_size - i;
        break;
      }
      budget -= kRankObjects;
      const auto& slot = job.slots[i];
      uint32_t rank = job.cluster ? job.cluster->rank_offset + i : i;
      // An exited rank's pid may be another process's by now, and a
      // reserved rank's is its launcher's.
      bool live = slot.state == SlotState::kRunning || slot.state == SlotState::kJoined;
      js.ranks.push_back({rank, i, slot.pid, slot.device, slot_state_name(slot.state),
                          live ? cpus_of(slot.pid, now) : ""});
    }
    // A rendezvous still forming: who joined, as the coordinator last said.
    if (job.cluster && !job.cluster->formed) js.forming = cluster_.cluster_state(id).forming;
    js.numa_binding = job.numa_binding;
    js.waits =
        job.cluster ? cluster_.relayed_waits(job, now) : daemon::open_waits(job, store_, now);
    for (size_t w = 0; w < js.waits.size(); ++w) {
      size_t cost = kWaitObjects + kWaitRankObjects * js.waits[w].ranks.size();
      if (budget < cost) {
        js.waits_left_out = js.waits.size() - w;
        js.waits.resize(w);
        break;
      }
      budget -= cost;
    }
    s.jobs.push_back(std::move(js));
  }
}

// Counted here rather than from status(), which reads each rank's /proc
// file: the summary is taken at the start of every round of the event loop.
std::string Reports::summary() const {
  size_t devices = 0, leased = 0, ranks = 0;
  for (const auto& d : jobs_.devices().slots()) {
    ++devices;
    if (!d.job.empty()) ++leased;
  }
  for (const auto& [id, job] : jobs_)
    for (uint32_t i = 0; i < job.local_world_size; ++i)
      if (slot_live(job.slots[i].state)) ++ranks;
  return std::to_string(jobs_.size()) + " job(s), " + std::to_string(leased) + " of " +
         std::to_string(devices) + " GPU(s) leased, " + std::to_string(ranks) + " rank(s)";
}

// The stuck-wait report: a barrier or key wait parked longer than
// --stuck-after is logged once, with the ranks it waits for, when the
// Store's timer for it comes (the loop wakes for it: no polling).
std::vector<proto::WaitStatus> Reports::open_waits(const std::string& id) const {
  const Job* job = jobs_.find(id);
  if (!job) return {};
  return daemon::open_waits(*job, store_, Clock::now());
}

void Reports::report_stuck(Clock::time_point now) {
  for (uint64_t id : store_.take_stuck(now)) {
    Store::Waiter* w = store_.find(id);
    // A peer's wait is in the global store of a job coordinated here.
    Job* job = !w ? nullptr : w->to.from_peer ? cluster_.global_store(w->job) : jobs_.find(w->job);
    if (!job) continue;
    std::string kind = "barrier", name = w->barrier;
    if (w->kind == Store::Kind::kBarrier) {
      auto b = job->barriers.find(w->barrier);
      if (b == job->barriers.end() || b->second.stuck_logged) continue;
      b->second.stuck_logged = true;
    } else {
      if (w->stuck_logged) continue;
      // One line for every rank waiting for the same keys now.
      for (uint64_t other : job->key_waiters)
        if (Store::Waiter* o = store_.find(other); o && o->keys == w->keys) o->stuck_logged = true;
      kind = "key", name.clear();
      for (const auto& k : w->keys) name += (name.empty() ? "" : ", ") + k;
    }
    // The coordinator's store counts whole subtrees: the nodes' heartbeats
    // name the missing ranks, once they came.
    name = proto::bounded_wait_name(std::move(name));  // as the waits name it
    auto waits =
        job->global ? cluster_.coordinated_waits(job->id) : std::vector<proto::WaitStatus>{};
    bool named = std::any_of(waits.begin(), waits.end(),
                             [&](const auto& s) { return s.kind == kind && s.name == name; });
    if (!named) waits = daemon::open_waits(*job, store_, now);
    for (const auto& s : waits)
      if (s.kind == kind && s.name == name) {
        ++stuck_detected_;
        log::warning("job=" + job->id + " stuck: " + describe(s));
        break;
      }
  }
}

WaitCounts Reports::wait_counts() const {
  auto relayed = cluster_.relayed_counts(Clock::now());
  return {store_.parked() + relayed.parked, store_.stuck() + relayed.stuck,
          stuck_detected_ + relayed.stuck_detected};
}

void Reports::set_stuck_after(std::chrono::milliseconds after) {
  store_.set_stuck_after(after);
  cluster_.set_stuck_after(after);
}

// The daemon's state as the metrics show it (metrics/sample.hpp): counted
// on the loop's thread, into plain values that the HTTP thread may read.
void Reports::fill_metrics(metrics::Sample& s, Clock::time_point now) const {
  s.uptime_s = std::chrono::duration<double>(now - started_).count();
  // Labels say a job by its name and its owner apart (common/job_id.hpp).
  auto owner_of = [](int64_t uid) { return uid < 0 ? std::string() : std::to_string(uid); };
  for (const auto& d : jobs_.devices().slots())
    s.gpus.push_back({d.device.index, d.device.uuid, std::string(job_name(d.job)),
                      d.job.empty() ? "" : owner_of(jobs_.get(d.job).owner_uid),
                      !d.quarantined().empty(), !d.drain.empty()});
  for (const auto& [id, job] : jobs_) {
    metrics::JobSample j;
    j.id = job_name(id);
    j.owner = owner_of(job.owner_uid);
    j.generation = job.generation;
    j.world_size = job.world_size();
    for (const auto& slot : job.slots) {
      auto i = static_cast<size_t>(slot.state);
      if (i < metrics::kSlotStates) ++j.ranks[i];
    }
    j.parked_waits = job.key_waiters.size();
    for (const auto& [name, b] : job.barriers) j.parked_waits += b.waiters.size();
    for (const auto& w : open_waits(id))
      if (w.stuck) ++j.stuck_waits;
    j.store_bytes = job.kv.bytes();
    j.store_keys = job.kv.size();
    s.jobs.push_back(std::move(j));
  }
  s.stuck_detected = wait_counts().stuck_detected;
}

}  // namespace muster::daemon
