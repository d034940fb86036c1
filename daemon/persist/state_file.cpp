#include "persist/state_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "job_id.hpp"
#include "liveness/pidwatch.hpp"
#include "liveness/proc_uids.hpp"
#include "log.hpp"
#include "persist/files.hpp"
#include "persist/progress_codec.hpp"
#include "persist/state_codec.hpp"

namespace muster::daemon {

namespace sc = state_codec;

StateFile::StateFile(std::string dir, int dir_fd, Env& env)
    : dir_{std::move(dir), dir_fd, &env}, path_(dir_.shown(kFileName)), log_(dir_) {}

StateFile::~StateFile() {
  if (dir_.fd != AT_FDCWD) ::close(dir_.fd);
}

namespace {

// A job saved without an owner (by a daemon from before owners, or by an
// in-process caller) would be anybody's: it takes the uid of the live
// processes that hold it, when they are all one uid's (every uid of each:
// real, effective, saved, filesystem), or is dropped with a line that says
// so. Its saved processes must still be the ones that held it (start time).
template <class Saved>
bool adopt_owner(const std::string& id, Saved& at) {
  auto& job = at.job;
  std::optional<int64_t> owner;
  bool one = true;
  for (uint32_t r = 0; r < job.local_world_size && one; ++r) {
    const auto& s = job.slots[r];
    if (!slot_live(s.state)) continue;
    uint64_t saved = at.started[r];
    auto uid = PidWatch::alive(s.pid) && (saved == 0 || PidWatch::start_time(s.pid) == saved)
                   ? sole_uid(s.pid)
                   : std::nullopt;
    if (!uid || (owner && *owner != *uid))
      one = false;
    else
      owner = uid;
  }
  if (one && owner) {
    job.owner_uid = *owner;
    log::notice(log::job(id), "job=" + id + " was saved without an owner; it belongs to uid " +
                                  std::to_string(*owner) + ", whose processes hold it");
    return true;
  }
  log::warning(log::job(id), "job=" + id +
                                 " was saved without an owner and no live processes of one uid "
                                 "hold it: not restored (nobody may take over a job that is "
                                 "nobody's)");
  return false;
}

}  // namespace

uint64_t StateFile::start_time(int64_t pid) {
  return PidWatch::start_time(pid);
}

uint64_t StateFile::started(int64_t pid) {
  if (auto it = start_times_.find(pid); it != start_times_.end()) return it->second;
  return start_times_[pid] = start_time(pid);
}

std::string StateFile::encode(const State& st, const ReplyCache& replies) {
  return sc::encode_snapshot(st, replies, epoch_, [this](int64_t pid) { return started(pid); });
}

bool StateFile::failed(const std::string& why) {
  // Once per failing stretch: the log would fill with the same line.
  if (failure_.empty())
    log::error("state not saved (" + why +
               "); replies that acknowledge changes wait until a save works");
  failure_ = why;
  return false;
}

bool StateFile::reserve(size_t request_bytes, bool job_change, bool peer, std::string* why) {
  // After a save failed with no log to append to, only a snapshot can carry
  // the next change, and its room cannot be reserved: refused until a
  // snapshot has worked again (retried by the server meanwhile).
  if (retrying()) {
    *why = "musterd cannot save changes in its state directory " + dir_.path + " (" + failure_ +
           "); nothing was changed. Send it again once the directory is writable";
    return false;
  }
  // The request's own bytes (a set's value, a reply that echoes it), one
  // job's header rewritten (a join may make a new one: room for some 230
  // slots; a larger new job on a nearly full disk is held, not refused, if
  // its header does not fit), and the records' framing.
  size_t header = job_change ? std::max<size_t>(largest_header_, 16 * 1024) : largest_header_;
  size_t n = 2 * request_bytes + header + 512;
  // Any change may rewrite the rounds' records (what they may grow to,
  // round_room, claimed once per save): a peer's join or leave, and as much
  // the coordinating node's own ranks, whose requests reach its
  // coordinator in process. A peer's join adds a node (kNodeBytes).
  // Claimed per request, a round of 12,500 nodes reserved 23 GB of tmpfs
  // in one batch of joins.
  if (peer) n += kNodeBytes;
  if (!round_room_claimed_) n += rounds_room_;
  std::string cause;
  if (log_.reserve(n, &cause)) {
    round_room_claimed_ = true;
    return true;
  }
  *why = "musterd cannot save this change: no room in its state directory " + dir_.path + " (" +
         cause + "); nothing was changed. Free space there and send it again";
  return false;
}

// Everything that changed since the last save, as records: job headers that
// differ from what the disk holds, the keys each store changed, the replies
// kept since, and the jobs that are gone.
void StateFile::append_changes(const State& st, ReplyCache& replies) {
  auto start = [this](int64_t pid) { return started(pid); };
  std::map<std::string, Written> now;
  for (const auto& [id, job] : st.jobs()) {
    std::string header = sc::job_header(job, start);
    auto w = written_.find(id);
    bool same_job = w != written_.end() && w->second.incarnation == job.incarnation;
    if (w != written_.end() && !same_job) log_.append(sc::kJobGone, sc::job_gone(id));
    if (!same_job || w->second.header != header) log_.append(sc::kJob, header);
    if (same_job) {
      for (const auto& k : job.kv.take_changed()) {
        if (const std::string* v = job.kv.find(k))
          log_.append(sc::kKey, sc::key_set(id, k, *v));
        else
          log_.append(sc::kKeyGone, sc::key_gone(id, k));
      }
    } else {
      // A job the disk has not seen (or saw as another job of that name).
      job.kv.forget_changes();
      for (const auto& [k, v] : job.kv) log_.append(sc::kKey, sc::key_set(id, k, v));
    }
    largest_header_ = std::max(largest_header_, header.size());
    now[id] = {job.incarnation, std::move(header), {}};
  }
  for (const auto& [id, w] : written_)
    if (!now.count(id)) log_.append(sc::kJobGone, sc::job_gone(id));
  for (const auto& f : replies.take_fresh())
    log_.append(sc::kReply, sc::reply(f.client, f.uid, f.e));
  if (std::string marks = sc::device_marks(st.devices().marks()); marks != written_marks_) {
    log_.append(sc::kDevices, marks);
    written_marks_ = std::move(marks);
  }
  append_progress(st);
  append_rounds(st);
  // The records stay buffered in the log until a commit writes them; the
  // disk's view is what they will make it.
  written_ = std::move(now);
}

bool StateFile::save(const State& st, ReplyCache& replies) {
  round_room_claimed_ = false;  // what the log claimed goes with this save
  if (need_snapshot_ || log_.broken() || !log_.open()) return snapshot(st, replies);
  append_changes(st, replies);
  std::string why;
  if (!log_.commit(&why)) {
    if (log_.broken()) need_snapshot_ = true;
    return failed(why);
  }
  if (!failure_.empty()) log::notice("state saved to " + dir_.path + " again");
  failure_.clear();
  // Folded into a new snapshot once the log outgrows it (a doubling rule:
  // the cost of snapshots stays proportional to the changes). Best effort:
  // the log holds everything either way.
  if (log_.size() > std::max<uint64_t>(kMinCompactBytes, snapshot_bytes_)) snapshot(st, replies);
  return true;
}

bool StateFile::snapshot(const State& st, ReplyCache& replies) {
  uint64_t epoch = epoch_ + 1;
  auto start = [this](int64_t pid) { return started(pid); };
  std::string why;
  uint64_t written = 0;
  auto produce = [&](const std::function<void(std::string_view)>& emit) {
    sc::encode_snapshot(st, replies, epoch, start, emit);
  };
  if (!files::write_durably(dir_, kFileName, produce, &why, &written)) {
    // The old snapshot and log still hold every acknowledged change; what
    // is buffered stays buffered.
    return need_snapshot_ ? failed(why) : true;
  }
  // From here the new snapshot is the truth: the old log (another epoch)
  // is ignored at load, so nothing may be appended to it any more.
  epoch_ = epoch;
  snapshot_bytes_ = written;
  log_.discard();
  (void)replies.take_fresh();
  note_written(st);
  // Keep only the start times of pids still in a slot.
  std::map<int64_t, uint64_t> times;
  for (const auto& [id, job] : st.jobs())
    for (const auto& s : job.slots)
      if (auto it = start_times_.find(s.pid); it != start_times_.end()) times.insert(*it);
  start_times_ = std::move(times);
  need_snapshot_ = !log_.start(epoch_, &why);
  if (need_snapshot_) log::warning("cannot start a new change log (" + why + ")");
  if (!failure_.empty()) log::notice("state saved to " + dir_.path + " again");
  failure_.clear();
  return true;
}

void StateFile::set_aside(const std::string& name, const std::string& why) {
  const std::string file = dir_.shown(name), bad = file + ".bad";
  if (dir_.env->renameat(dir_.fd, dir_.at(name).c_str(), dir_.fd, dir_.at(name + ".bad").c_str()) ==
      0)
    log::warning("state file " + file + " cannot be used (" + why + "); moved it to " + bad +
                 " and starting with no jobs");
  else if (errno != ENOENT)
    log::warning("state file " + file + " cannot be used (" + why + ") nor moved to " + bad + " (" +
                 std::strerror(errno) + "); starting with no jobs");
}

size_t StateFile::load(State& st, ReplyCache& replies) {
  sc::Loaded l;
  uint64_t log_end = 0;
  bool have_log = false;
  try {
    std::string bytes;
    if (files::read_all(dir_, kFileName, bytes)) l = sc::decode_snapshot(bytes);
    bool torn = false;
    have_log = ChangeLog::replay(
        dir_, l.epoch, [&](uint8_t type, std::string_view payload) { sc::apply(l, type, payload); },
        &log_end, &torn);
    if (torn)
      log::warning("the change log " + log_.path() +
                   " ends in a record cut short (a crash while writing it); its intact records "
                   "are restored, and the cut one was never acknowledged");
    sc::check(l);
  } catch (const std::exception& e) {
    set_aside(kFileName, e.what());
    set_aside(ChangeLog::kFileName, e.what());
    l = sc::Loaded{};
    have_log = false;
  }
  epoch_ = l.epoch;
  // Watch every live slot's pid again (one reference per slot, as when it
  // was taken); a pid that is gone, or now names another process, ends its
  // slots below, the way an exit seen while running would.
  std::map<int64_t, bool> alive;
  size_t restored = 0;
  for (auto& [id, at] : l.jobs) {
    auto& job = at.job;
    if (!job.live()) continue;  // nothing left of it
    if (job.owner_uid < 0 && !adopt_owner(id, at)) continue;
    // Saved before each user's jobs were a namespace of their own: known by
    // its name alone, its key now says its owner (common/job_id.hpp).
    if (job.owner_uid > 0 && job.id.find('~') == std::string::npos)
      job.id = job_key(job.owner_uid, job.id);
    for (uint32_t r = 0; r < job.local_world_size; ++r) {
      const auto& s = job.slots[r];
      if (!slot_live(s.state)) continue;
      auto [it, fresh] = alive.try_emplace(s.pid, false);
      if (fresh) {
        uint64_t saved = at.started[r];
        it->second = PidWatch::alive(s.pid) && (saved == 0 || start_time(s.pid) == saved);
        if (it->second && saved) start_times_[s.pid] = saved;
      }
      if (it->second && !st.pid_watch().watch(s.pid)) it->second = false;
    }
    job.kv.forget_changes();
    st.restore(std::move(job));
    ++restored;
  }
  st.restore_device_marks(l.marks);
  for (auto& r : l.replies) replies.restore(r.client, r.uid, std::move(r.e));
  restore_progress(st, l.progress);
  restore_rounds(st, l.rounds);
  (void)replies.take_fresh();
  // What the disk holds now: if no new snapshot can be written below, the
  // next save appends the differences (the endings that follow, too).
  note_written(st);
  size_t gone = end_gone(st, alive);
  if (restored || have_log)
    log::notice("restored " + std::to_string(restored) + " job(s) from " + dir_.path +
                (gone ? "; " + std::to_string(gone) +
                            " process(es) ended while musterd was down and lost their slots"
                      : ""));
  // Folded at start: a new snapshot, a new empty log. Where the disk has no
  // room for that, appending goes on after the log just read.
  std::string why;
  if (snapshot(st, replies)) return restored;
  if (have_log ? log_.resume(log_end, &why) : log_.start(epoch_, &why))
    need_snapshot_ = false;
  else
    log::warning("cannot open a change log in " + dir_.path + " (" + why +
                 "); changes are refused until it can");
  return restored;
}

// The slots whose processes ended while the daemon was down end now. A job
// of a round coordinated here that ended so leaves that round too
// (State::loop_back); what would go to other daemons is dropped (they hear
// of it by its missing heartbeats), and replies go nowhere: nobody waits yet.
size_t StateFile::end_gone(State& st, const std::map<int64_t, bool>& alive) {
  std::vector<Outgoing> out;
  size_t gone = 0;
  for (const auto& [pid, ok] : alive)
    if (!ok) {
      ++gone;
      st.on_pid_exit(pid, out);
    }
  st.loop_back(out);
  return gone;
}

// The runs whose sampler progress differs from what the disk holds.
void StateFile::append_progress(const State& st) {
  auto start = [this](int64_t pid) { return started(pid); };
  std::map<std::string, std::string> now;
  for (const auto& [job, run] : st.samplers().progress().all()) {
    std::string bytes = progress_codec::run_record(job, run, start);
    auto w = written_progress_.find(job);
    if (w == written_progress_.end() || w->second != bytes) log_.append(sc::kProgress, bytes);
    now[job] = std::move(bytes);
  }
  for (const auto& [job, bytes] : written_progress_)
    if (!now.count(job)) log_.append(sc::kProgressGone, progress_codec::run_gone(job));
  written_progress_ = std::move(now);
}

// A run's progress comes back while its launcher lives (the same process:
// its start time as saved), or, without a launcher, while its job does.
void StateFile::restore_progress(State& st, std::map<std::string, SamplerRun>& runs) {
  for (auto& [job, run] : runs) {
    const int64_t pid = run.launcher_pid;
    if (pid > 0 && !(PidWatch::alive(pid) &&
                     (run.launcher_started == 0 || start_time(pid) == run.launcher_started)))
      continue;
    if (pid > 0 && run.launcher_started) start_times_[pid] = run.launcher_started;
    st.samplers().restore_progress(job, std::move(run));
  }
}

void StateFile::note_written(const State& st) {
  written_progress_.clear();
  for (const auto& [job, run] : st.samplers().progress().all())
    written_progress_[job] =
        progress_codec::run_record(job, run, [this](int64_t pid) { return started(pid); });
  written_.clear();
  written_marks_ = sc::device_marks(st.devices().marks());
  largest_header_ = 0;
  auto start = [this](int64_t pid) { return started(pid); };
  for (const auto& [id, job] : st.jobs()) {
    job.kv.forget_changes();
    std::string header = state_codec::job_header(job, start);
    largest_header_ = std::max(largest_header_, header.size());
    written_[id] = {job.incarnation, std::move(header), {}};
  }
  note_rounds(st);
}

}  // namespace muster::daemon
