#include "persist/state_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "liveness/pidwatch.hpp"
#include "log.hpp"
#include "protocol/codec.hpp"
#include "protocol/limits.hpp"

namespace muster::daemon {

namespace {

constexpr const char* kFormatName = "musterd-state";

using codec::key;
using codec::MapReader;
using codec::put_bin;
using codec::put_str;

SlotState parse_slot_state(const std::string& s) {
  if (auto st = slot_state_from_string(s)) return *st;
  throw Error(ErrorCode::kBadMessage, "unknown slot state '" + s + "'");
}

// Everything read from the file, checked, before any of it touches the State.
struct Loaded {
  std::vector<Job> jobs;
  std::vector<std::vector<uint64_t>> started;  // per job, per slot
  struct Reply {
    std::string client;
    int64_t uid;
    ReplyCache::Entry e;
  };
  std::vector<Reply> replies;
};

ClusterInfo decode_cluster(const msgpack::object& o, const std::string& job) {
  MapReader cr(o, "job '" + job + "' cluster");
  ClusterInfo c;
  c.coordinator = cr.str("coordinator", 256);
  c.formed = cr.boolean("formed");
  c.node_rank = static_cast<uint32_t>(cr.u64("node_rank", 0, UINT32_MAX));
  c.num_nodes = static_cast<uint32_t>(cr.u64("num_nodes", 1, UINT32_MAX));
  c.rank_offset = static_cast<uint32_t>(cr.u64("rank_offset", 0, UINT32_MAX));
  c.world_size = static_cast<uint32_t>(cr.u64("world_size", 0, UINT32_MAX));
  c.parent = cr.str("parent", 256);
  c.subtree_ranks = static_cast<uint32_t>(cr.u64("subtree_ranks", 0, UINT32_MAX));
  auto phase = cr.str("state", 32);
  c.phase = cluster_phase_from_string(phase).value_or(ClusterPhase::kBroken);
  if (c.coordinator.empty())
    throw Error(ErrorCode::kBadMessage, "job '" + job + "' has no coordinator");
  return c;
}

// What the jobs read so far hold: no id or device may repeat.
struct Seen {
  std::set<std::string> ids;
  std::map<int64_t, std::pair<std::string, uint32_t>> held;  // device -> (job, local rank)
};

// One job, its slots' start times into `started`.
Job decode_job(const msgpack::object& o, uint32_t j, std::vector<uint64_t>& started, Seen& seen) {
  MapReader jr(o, "state.jobs[" + std::to_string(j) + "]");
  Job job;
  job.id = jr.str("id", limits::kMaxJobIdBytes);
  if (job.id.empty() || !seen.ids.insert(job.id).second)
    throw Error(ErrorCode::kBadMessage, "empty or repeated job id '" + job.id + "'");
  job.generation = jr.u64("generation", 0, UINT64_MAX);
  job.local_world_size =
      static_cast<uint32_t>(jr.u64("local_world_size", 1, limits::kMaxLocalWorldSize));
  job.wants_gpu = jr.boolean("wants_gpu");
  if (jr.has("owner")) job.owner_uid = jr.i64("owner", -1, INT32_MAX);
  if (jr.has("cluster")) job.cluster = decode_cluster(jr.map("cluster"), job.id);
  const auto& slots = jr.array("slots", limits::kMaxLocalWorldSize);
  if (slots.size != job.local_world_size)
    throw Error(ErrorCode::kBadMessage, "job '" + job.id + "' has " + std::to_string(slots.size) +
                                            " slot(s) for " + std::to_string(job.local_world_size) +
                                            " rank(s)");
  for (uint32_t i = 0; i < slots.size; ++i) {
    MapReader sr(slots.ptr[i], "job '" + job.id + "' slot " + std::to_string(i));
    Slot s;
    s.state = parse_slot_state(sr.str("state", 16));
    s.pid = sr.i64("pid", 0, INT32_MAX);
    s.joined_pid = sr.i64("joined_pid", 0, INT32_MAX);
    s.device = sr.i64("device", -1, INT32_MAX);
    started.push_back(sr.u64("started", 0, UINT64_MAX));
    if (slot_live(s.state) && s.pid <= 0)
      throw Error(ErrorCode::kBadMessage,
                  "job '" + job.id + "' slot " + std::to_string(i) + " is live without a pid");
    if (s.device >= 0) {
      if (!slot_live(s.state))
        throw Error(ErrorCode::kBadMessage, "job '" + job.id + "' slot " + std::to_string(i) +
                                                " holds device " + std::to_string(s.device) +
                                                " without a live process");
      auto [it, fresh] = seen.held.try_emplace(s.device, job.id, i);
      if (!fresh)
        throw Error(ErrorCode::kBadMessage,
                    "device " + std::to_string(s.device) + " is held by job '" + it->second.first +
                        "' and by job '" + job.id + "': a device is never leased twice");
    }
    job.slots.push_back(s);
  }
  const auto& kv = jr.array("kv", 1u << 24);
  for (uint32_t k = 0; k < kv.size; ++k) {
    MapReader kr(kv.ptr[k], "job '" + job.id + "' key " + std::to_string(k));
    job.kv[kr.bin("k", limits::kMaxKeyBytes)] = kr.bin("v", limits::kMaxValueBytes);
  }
  return job;
}

// The leases, written beside the slots, must say the same.
void check_leases(const MapReader& top,
                  const std::map<int64_t, std::pair<std::string, uint32_t>>& held) {
  const auto& leases = top.array("leases", limits::kMaxDevices);
  if (leases.size != held.size())
    throw Error(ErrorCode::kBadMessage, std::to_string(leases.size) + " lease(s) for " +
                                            std::to_string(held.size()) + " device(s) held");
  for (uint32_t i = 0; i < leases.size; ++i) {
    MapReader lr(leases.ptr[i], "state.leases[" + std::to_string(i) + "]");
    auto d = lr.i64("device", 0, INT32_MAX);
    auto job = lr.str("job", limits::kMaxJobIdBytes);
    auto r = lr.u64("local_rank", 0, limits::kMaxLocalWorldSize);
    auto it = held.find(d);
    if (it == held.end() || it->second.first != job || it->second.second != r)
      throw Error(ErrorCode::kBadMessage, "lease of device " + std::to_string(d) + " to job '" +
                                              job + "' local rank " + std::to_string(r) +
                                              " matches no slot");
  }
}

void decode_replies(const MapReader& top, std::vector<Loaded::Reply>& out) {
  const auto& replies = top.array("replies", ReplyCache::kMaxClients * ReplyCache::kPerClient);
  for (uint32_t i = 0; i < replies.size; ++i) {
    MapReader rr(replies.ptr[i], "state.replies[" + std::to_string(i) + "]");
    ReplyCache::Entry e;
    auto client = rr.bin("client", 255);
    // A reply belongs to its client's uid; one saved without it (an older
    // musterd) is not handed out to whoever presents the routing id.
    if (!rr.has("uid")) continue;
    int64_t uid = rr.i64("uid", -1, UINT32_MAX);
    e.request_id = rr.u64("id", 0, UINT64_MAX);
    e.hash = rr.u64("hash", 0, UINT64_MAX);
    e.type = static_cast<uint16_t>(rr.u64("type", 0, 0xffff));
    e.frame = rr.bin("frame", ReplyCache::kMaxFrameBytes);
    out.push_back({std::move(client), uid, std::move(e)});
  }
}

Loaded decode(const std::string& bytes) {
  // Limits bound what msgpack allocates before anything is checked.
  msgpack::unpack_limit lim(1u << 24, 1u << 16, limits::kMaxValueBytes, limits::kMaxValueBytes, 0,
                            limits::kMaxDepth);
  size_t offset = 0;
  auto handle = msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, lim);
  if (offset != bytes.size()) throw Error(ErrorCode::kBadMessage, "trailing bytes after the state");
  MapReader top(handle.get(), "state");
  if (top.str("format", 64) != kFormatName)
    throw Error(ErrorCode::kBadMessage, "not a musterd state file");
  auto version = top.u64("version", 0, UINT64_MAX);
  if (version != StateFile::kFormatVersion)
    throw Error(ErrorCode::kBadVersion, "format version " + std::to_string(version) +
                                            ", this musterd reads version " +
                                            std::to_string(StateFile::kFormatVersion));
  Loaded l;
  Seen seen;
  const auto& jobs = top.array("jobs", 1u << 20);
  for (uint32_t j = 0; j < jobs.size; ++j) {
    std::vector<uint64_t> started;
    Job job = decode_job(jobs.ptr[j], j, started, seen);
    if (!job.live()) continue;  // nothing left of it (not written that way)
    l.jobs.push_back(std::move(job));
    l.started.push_back(std::move(started));
  }
  check_leases(top, seen.held);
  decode_replies(top, l.replies);
  return l;
}

// One job: its slots (with their pids' start times, from `started`) and
// its store.
template <class Started>
void encode_job(codec::Packer& p, const Job& job, Started started) {
  p.pack_map(job.cluster ? 8 : 7);
  key(p, "id"), put_str(p, job.id);
  key(p, "owner"), p.pack(job.owner_uid);
  if (job.cluster) {
    // A node's part of a multi-node job: where its world is, so that the
    // restarted daemon relays to the coordinator again and heartbeats.
    const ClusterInfo& c = *job.cluster;
    key(p, "cluster"), p.pack_map(9);
    key(p, "coordinator"), put_str(p, c.coordinator);
    key(p, "formed"), p.pack(c.formed);
    key(p, "node_rank"), p.pack(c.node_rank);
    key(p, "num_nodes"), p.pack(c.num_nodes);
    key(p, "rank_offset"), p.pack(c.rank_offset);
    key(p, "world_size"), p.pack(c.world_size);
    key(p, "parent"), put_str(p, c.parent);
    key(p, "subtree_ranks"), p.pack(c.subtree_ranks);
    key(p, "state"), put_str(p, to_string(c.phase));
  }
  key(p, "generation"), p.pack(job.generation);
  key(p, "local_world_size"), p.pack(job.local_world_size);
  key(p, "wants_gpu"), p.pack(job.wants_gpu);
  key(p, "slots"), p.pack_array(static_cast<uint32_t>(job.slots.size()));
  for (const auto& s : job.slots) {
    p.pack_map(5);
    key(p, "state"), put_str(p, slot_state_name(s.state));
    key(p, "pid"), p.pack(s.pid);
    key(p, "joined_pid"), p.pack(s.joined_pid);
    key(p, "device"), p.pack(s.device);
    key(p, "started"), p.pack(slot_live(s.state) ? started(s.pid) : uint64_t{0});
  }
  // Sorted, so that the same store encodes the same bytes.
  std::map<std::string_view, std::string_view> kv(job.kv.begin(), job.kv.end());
  key(p, "kv"), p.pack_array(static_cast<uint32_t>(kv.size()));
  for (const auto& [k, v] : kv) {
    p.pack_map(2);
    key(p, "k"), put_bin(p, k);
    key(p, "v"), put_bin(p, v);
  }
}

bool read_file(const std::string& path, std::string& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    throw Error(ErrorCode::kInternal, std::string("cannot open it: ") + std::strerror(errno));
  }
  out.clear();
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw Error(ErrorCode::kInternal, std::string("cannot read it: ") + std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

bool write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

StateFile::StateFile(std::string dir) : dir_(std::move(dir)), path_(dir_ + "/" + kFileName) {}

StateFile::~StateFile() = default;

uint64_t StateFile::start_time(int64_t pid) {
  auto fields = PidWatch::stat_fields(pid);
  if (!fields) return 0;
  // Field 3 (state) ... field 22 (starttime).
  std::istringstream rest(*fields);
  std::string field;
  for (int n = 3; n <= 22; ++n)
    if (!(rest >> field)) return 0;
  try {
    return std::stoull(field);
  } catch (const std::exception&) {
    return 0;
  }
}

std::string StateFile::encode(const State& st, const ReplyCache& replies) {
  codec::Buffer buf;
  codec::Packer p(buf);
  std::map<int64_t, uint64_t> times;
  auto started = [&](int64_t pid) {
    if (auto it = times.find(pid); it != times.end()) return it->second;
    auto it = start_times_.find(pid);
    uint64_t t = it != start_times_.end() ? it->second : start_time(pid);
    times[pid] = t;
    return t;
  };
  p.pack_map(5);
  key(p, "format"), put_str(p, kFormatName);
  key(p, "version"), p.pack(kFormatVersion);
  key(p, "jobs"), p.pack_array(static_cast<uint32_t>(st.jobs().size()));
  for (const auto& [id, job] : st.jobs()) encode_job(p, job, started);
  uint32_t leased = 0;
  for (const auto& d : st.devices().slots())
    if (!d.job.empty()) ++leased;
  key(p, "leases"), p.pack_array(leased);
  for (const auto& d : st.devices().slots()) {
    if (d.job.empty()) continue;
    p.pack_map(3);
    key(p, "device"), p.pack(static_cast<int64_t>(d.device.index));
    key(p, "job"), put_str(p, d.job);
    key(p, "local_rank"), p.pack(d.local_rank);
  }
  struct Saved {
    const std::string* client;
    int64_t uid;
    const ReplyCache::Entry* e;
  };
  std::vector<Saved> saved;
  replies.for_each_saved([&](const std::string& c, int64_t uid, const ReplyCache::Entry& e) {
    saved.push_back({&c, uid, &e});
  });
  key(p, "replies"), p.pack_array(static_cast<uint32_t>(saved.size()));
  for (const auto& [c, uid, e] : saved) {
    p.pack_map(6);
    key(p, "client"), put_bin(p, *c);
    key(p, "uid"), p.pack(uid);
    key(p, "id"), p.pack(e->request_id);
    key(p, "hash"), p.pack(e->hash);
    key(p, "type"), p.pack(e->type);
    key(p, "frame"), put_bin(p, e->frame);
  }
  start_times_ = std::move(times);
  return std::string(buf.data(), buf.size());
}

bool StateFile::save(const State& state, const ReplyCache& replies) {
  std::string bytes = encode(state, replies);
  if (bytes == last_) return true;
  std::string tmp = path_ + ".tmp";
  std::string failed;
  auto fail = [&](const std::string& what) {
    if (failed.empty()) failed = what + ": " + std::strerror(errno);
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    fail("cannot create " + tmp);
  } else {
    if (!write_all(fd, bytes))
      fail("cannot write " + tmp);
    else if (::fsync(fd) != 0)
      fail("cannot fsync " + tmp);
    ::close(fd);
    if (failed.empty() && ::rename(tmp.c_str(), path_.c_str()) != 0)
      fail("cannot rename " + tmp + " to " + path_);
  }
  if (failed.empty()) {
    // The rename itself is durable once the directory is synced.
    int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || ::fsync(dfd) != 0) fail("cannot fsync the directory " + dir_);
    if (dfd >= 0) ::close(dfd);
  } else {
    ::unlink(tmp.c_str());
  }
  if (!failed.empty()) {
    // Once per failing stretch: the daemon keeps serving without it.
    if (!failing_)
      log::error("state not saved (" + failed +
                 "); a restarted musterd would not know the jobs running now");
    failing_ = true;
    return false;
  }
  if (failing_) log::notice("state saved to " + path_ + " again");
  failing_ = false;
  last_ = std::move(bytes);
  return true;
}

void StateFile::set_aside(const std::string& why) {
  std::string bad = path_ + ".bad";
  if (::rename(path_.c_str(), bad.c_str()) == 0)
    log::warning("state file " + path_ + " cannot be used (" + why + "); moved it to " + bad +
                 " and starting with no jobs");
  else
    log::warning("state file " + path_ + " cannot be used (" + why + ") nor moved to " + bad +
                 " (" + std::strerror(errno) + "); starting with no jobs");
}

size_t StateFile::load(State& st, ReplyCache& replies) {
  Loaded l;
  try {
    std::string bytes;
    if (!read_file(path_, bytes)) return 0;
    l = decode(bytes);
  } catch (const std::exception& e) {
    set_aside(e.what());
    return 0;
  }
  // Watch every live slot's pid again (one reference per slot, as when it
  // was taken); a pid that is gone, or now names another process, ends its
  // slots below, the way an exit seen while running would.
  std::map<int64_t, bool> alive;
  for (size_t j = 0; j < l.jobs.size(); ++j) {
    const auto& job = l.jobs[j];
    for (uint32_t r = 0; r < job.local_world_size; ++r) {
      const auto& s = job.slots[r];
      if (!slot_live(s.state)) continue;
      auto [it, fresh] = alive.try_emplace(s.pid, false);
      if (fresh) {
        uint64_t saved = l.started[j][r];
        it->second = PidWatch::alive(s.pid) && (saved == 0 || start_time(s.pid) == saved);
        if (it->second && saved) start_times_[s.pid] = saved;
      }
      if (it->second && !st.pid_watch().watch(s.pid)) it->second = false;
    }
  }
  size_t restored = l.jobs.size();
  for (auto& job : l.jobs) st.restore(std::move(job));
  for (auto& r : l.replies) replies.restore(r.client, r.uid, std::move(r.e));
  std::vector<Outgoing> out;  // nobody waits yet: stays empty
  size_t gone = 0;
  for (const auto& [pid, ok] : alive)
    if (!ok) {
      ++gone;
      st.on_pid_exit(pid, out);
    }
  log::notice("restored " + std::to_string(restored) + " job(s) from " + path_ +
              (gone ? "; " + std::to_string(gone) +
                          " process(es) ended while musterd was down and lost their slots"
                    : ""));
  return restored;
}

}  // namespace muster::daemon
