#include "contain/job_cgroups.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "contain/cgroup.hpp"
#include "job_id.hpp"
#include "log.hpp"
#include "shm/segment_names.hpp"

namespace muster::daemon::contain {

namespace {

// A killed cgroup empties within milliseconds; past this it is left behind
// with a warning rather than retried forever.
constexpr auto kRemoveFor = std::chrono::seconds(10);

// FNV-1a of the runtime dir: stable across restarts and builds.
std::string daemon_dir_name(const std::string& runtime_dir) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : runtime_dir) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "musterd-%012llx",
                static_cast<unsigned long long>(h & 0xffffffffffffull));
  return buf;
}

// A job id is the user's text: only [A-Za-z0-9_.-] reach the file system,
// and the first worker's pid keeps two ids that read alike (or a job
// reserved again while its old cgroup empties) apart.
std::string cgroup_name(const std::string& id, int64_t first_pid) {
  std::string safe;
  for (unsigned char c : id.substr(0, 100))
    safe += std::isalnum(c) || c == '_' || c == '.' || c == '-' ? static_cast<char>(c) : '_';
  return "job-" + safe + "-" + std::to_string(first_pid);
}

// What SIGKILLed daemons of this machine that never came back left in the
// hierarchy: their jobs' cgroups, empty once the jobs ended (a cgroup v2
// has no release agent). One that has been empty for a minute is nobody's
// any more: a daemon fills a job's cgroup in the round it makes it.
void sweep_dead_daemons(const std::string& parent, const std::string& ours) {
  for (const auto& d : children(parent)) {
    if (d.rfind("musterd-", 0) != 0 || d == ours) continue;
    std::string dir = parent + "/" + d;
    for (const auto& job : children(dir)) {
      std::string j = dir + "/" + job;
      if (job.rfind("job-", 0) == 0 && empty(j) && age_s(j) > 60) remove(j);
    }
    if (age_s(dir) > 60) remove(dir);  // only when nothing is left in it
  }
}

bool any_reserved(const Job& job) {
  return std::any_of(job.slots.begin(), job.slots.end(),
                     [](const Slot& s) { return s.state == SlotState::kReserved; });
}

}  // namespace

JobCgroups::JobCgroups(const std::string& mode, const std::string& runtime_dir, PidWatch& watch)
    : watch_(watch) {
  std::string why;
  if (mode == "guardian") {
    why = "--containment guardian";
  } else {
    OwnCgroup own = own_cgroup();
    why = own.why_not;
    if (why.empty()) {
      std::string dir = own.dir + "/" + daemon_dir_name(runtime_dir);
      sweep_dead_daemons(own.dir, daemon_dir_name(runtime_dir));
      // Made to learn whether we may, then kept only while it holds a job
      // (or what a killed daemon left for us to adopt): a daemon that is
      // SIGKILLed between jobs leaves nothing behind.
      why = make(dir);
      if (why.empty()) base_ = dir;
      if (why.empty() && children(dir).empty()) remove(dir);
    }
  }
  if (uses_cgroups()) {
    description_ = "cgroup " + base_;
    log::notice("containment: each job gets a cgroup under " + base_ +
                "; its end kills everything in it");
  } else {
    description_ = "guardian (" + why + ")";
    log::warning("containment: no cgroup for jobs (" + why +
                 "); only muster run's guardian ends what a job leaves behind");
  }
}

JobCgroups::~JobCgroups() {
  // Running jobs keep their cgroups: a restarted daemon adopts them. An
  // empty one (its job's processes are all gone) has nothing to keep, and
  // with no daemon to remove it later it would stay in the hierarchy.
  for (const auto& [id, r] : records_)
    if (!r.dir.empty()) remove(r.dir);
  for (int i = 0; i < 100 && !removals_.empty(); ++i) {
    retry_removals();
    if (!removals_.empty()) ::usleep(10000);
  }
  if (uses_cgroups()) remove(base_);  // only when no job's cgroup is left in it
}

void JobCgroups::adopt(const std::map<std::string, Job>& jobs) {
  adopted_ = true;
  if (!uses_cgroups()) return;
  auto names = children(base_);
  std::set<std::string> there(names.begin(), names.end()), known;
  for (const auto& [id, job] : jobs) {
    if (job.global || job.slots.empty()) continue;
    Record& r = records_[id];
    r.owner = job.owner_uid;
    // Workers of a restored job were placed (or not) by the last daemon;
    // an exec'd process is not moved after the fact.
    for (const auto& s : job.slots)
      if (s.state == SlotState::kRunning || s.state == SlotState::kJoined) r.placed.insert(s.pid);
    std::string name = cgroup_name(id, job.slots[0].pid);
    if (!r.placed.empty() && there.count(name)) {
      r.dir = base_ + "/" + name;
      known.insert(name);
    }
  }
  // Left by a daemon whose jobs are gone (it was killed before their end).
  for (const auto& name : names)
    if (!known.count(name)) kill(base_ + "/" + name, "left by an earlier musterd");
}

void JobCgroups::sync(const std::map<std::string, Job>& jobs) {
  if (!adopted_) adopt(jobs);
  for (auto it = records_.begin(); it != records_.end();) {
    if (jobs.count(it->first)) {
      ++it;
      continue;
    }
    end(it->first, it->second);
    it = records_.erase(it);
  }
  for (const auto& [id, job] : jobs) {
    if (job.global) continue;  // a coordinator's store: no processes here
    Record& r = records_[id];
    r.owner = job.owner_uid;
    if (!any_reserved(job)) {
      place(id, job, r);
      continue;
    }
    // Reserved again (muster run's next attempt): the last attempt's
    // cgroup goes before the new workers come.
    if (!r.placed.empty()) {
      end(id, r);
      r = Record{};
      r.owner = job.owner_uid;
    }
    int64_t launcher = 0;
    for (const auto& s : job.slots)
      if (s.state == SlotState::kReserved) launcher = s.pid;
    if (uses_cgroups() && r.launcher != launcher) {
      if (r.launcher) watch_.unwatch(r.launcher);
      r.launcher = watch_.watch(launcher) ? launcher : 0;
    }
  }
}

void JobCgroups::place(const std::string& id, const Job& job, Record& r) {
  for (const auto& s : job.slots) {
    if (s.state != SlotState::kRunning || r.placed.count(s.pid)) continue;
    r.placed.insert(s.pid);
    if (!uses_cgroups()) continue;
    if (r.dir.empty()) {
      std::string dir = base_ + "/" + cgroup_name(id, s.pid);
      std::string why = make(base_);
      if (why.empty()) why = make(dir);
      if (!why.empty()) {
        log::warning("job=" + id + " runs without a cgroup: " + why);
        continue;
      }
      r.dir = dir;
    }
    if (auto why = move(r.dir, static_cast<pid_t>(s.pid)); !why.empty())
      log::warning("job=" + id + " pid=" + std::to_string(s.pid) +
                   " stays outside the job's cgroup: " + why);
    else
      log::info("job=" + id + " pid=" + std::to_string(s.pid) + " placed in " + r.dir);
  }
}

void JobCgroups::end(const std::string& id, Record& r) {
  if (r.launcher) watch_.unwatch(r.launcher);
  r.launcher = 0;
  if (!r.dir.empty()) {
    std::string dir = std::move(r.dir);
    r.dir.clear();
    kill(dir, "job=" + id + " ended");
  }
  // Segments of broadcast roots that were SIGKILLed (the others unlinked
  // theirs); those of live processes stay.
  // libmuster names segments by the job's name (its processes know no key):
  // two users' jobs of one name share a prefix, told apart by the owner of
  // each file.
  if (size_t n = shm::remove_orphans(shm::job_prefix(std::string(job_name(id))), r.owner))
    log::info("job=" + id + ": removed " + std::to_string(n) +
              " shared memory segment(s) of dead ranks");
}

void JobCgroups::kill(const std::string& dir, const std::string& why) {
  if (auto failed = kill_all(dir); !failed.empty())
    log::warning(why + ": " + failed);
  else
    log::info(why + ": killed what was left in " + dir);
  if (!remove(dir)) removals_.push_back({dir, Clock::now()});
  remove_base_when_idle();
}

void JobCgroups::remove_base_when_idle() {
  if (!uses_cgroups() || !removals_.empty()) return;
  for (const auto& [id, r] : records_)
    if (!r.dir.empty()) return;
  remove(base_);  // fails, harmlessly, while a cgroup we do not know is in it
}

void JobCgroups::pid_exited(int64_t pid) {
  for (auto& [id, r] : records_) {
    if (r.launcher != pid) continue;
    r.launcher = 0;  // the pid watch forgot it with its exit
    if (!r.dir.empty()) kill_all(r.dir);
    log::info("job=" + id + ": launcher pid=" + std::to_string(pid) +
              " exited; killed what was left in the job's cgroup");
  }
}

void JobCgroups::retry_removals() {
  if (removals_.empty()) return;
  auto now = Clock::now();
  std::erase_if(removals_, [&](const Removal& r) {
    if (remove(r.dir)) return true;
    if (now - r.since < kRemoveFor) return false;
    log::warning("cgroup " + r.dir + " still holds processes; left in place");
    return true;
  });
  if (removals_.empty()) remove_base_when_idle();
}

std::string JobCgroups::job_of(int64_t pid) const {
  if (base_.empty()) return "";
  std::string dir = cgroup_dir_of(static_cast<pid_t>(pid));
  if (dir.empty()) return "";
  for (const auto& [id, r] : records_)
    if (!r.dir.empty() && (dir == r.dir || dir.rfind(r.dir + "/", 0) == 0)) return id;
  return "";
}

}  // namespace muster::daemon::contain
