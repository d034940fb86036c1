#include "persist/state_codec.hpp"

#include <set>

#include "cluster/multi_node.hpp"
#include "persist/cluster_codec.hpp"
#include "persist/progress_codec.hpp"
#include "persist/round_codec.hpp"
#include "protocol/bounded_unpack.hpp"
#include "protocol/codec.hpp"
#include "protocol/limits.hpp"

namespace muster::daemon::state_codec {

namespace {

constexpr const char* kFormatName = "musterd-state";

using codec::key;
using codec::MapReader;
using codec::put_bin;
using codec::put_str;

// The same bounded decoding as a frame's (protocol/bounded_unpack.hpp): a
// damaged length in a state file cannot make the load allocate more than
// the file's own bytes can hold. A state file is the daemon's own and may
// be large (every job's store), so its budget is proportional only: one
// object per byte, which a valid file never exceeds.
msgpack::object_handle unpack(std::string_view bytes) {
  msgpack::unpack_limit lim(1u << 24, 1u << 16, limits::kMaxValueBytes, limits::kMaxValueBytes, 0,
                            limits::kMaxDepth);
  size_t offset = 0;
  codec::DecodeBudget budget{bytes.size() + 1, limits::kMaxDepth};
  msgpack::object_handle handle;
  try {
    handle = codec::bounded_unpack(bytes.data(), bytes.size(), offset, budget, nullptr, lim);
  } catch (const codec::TooManyObjects& e) {
    throw Error(ErrorCode::kBadMessage, e.what());
  }
  if (offset != bytes.size()) throw Error(ErrorCode::kBadMessage, "trailing bytes");
  return handle;
}

std::string bytes_of(const codec::Buffer& buf) {
  return std::string(buf.data(), buf.size());
}

SlotState parse_slot_state(const std::string& s) {
  if (auto st = slot_state_from_string(s)) return *st;
  throw Error(ErrorCode::kBadMessage, "unknown slot state '" + s + "'");
}

// One job (its store too when the map has one: a snapshot's job has, a
// log's header has not), its slots' start times into `started`.
Loaded::JobAt decode_job(const msgpack::object& o, const std::string& what) {
  MapReader jr(o, what);
  Loaded::JobAt at;
  Job& job = at.job;
  job.id = jr.str("id", limits::kMaxJobIdBytes);
  if (job.id.empty()) throw Error(ErrorCode::kBadMessage, "a job without an id");
  job.generation = jr.u64("generation", 0, UINT64_MAX);
  job.local_world_size =
      static_cast<uint32_t>(jr.u64("local_world_size", 1, limits::kMaxLocalWorldSize));
  job.wants_gpu = jr.boolean("wants_gpu");
  if (jr.has("owner")) job.owner_uid = jr.i64("owner", -1, INT32_MAX);
  if (jr.has("launcher")) job.launcher_pid = jr.i64("launcher", 0, INT32_MAX);
  if (jr.has("numa")) job.numa_binding = jr.str("numa", 16);
  if (jr.has("cluster")) job.cluster = cluster_codec::decode_cluster(jr.map("cluster"), job.id);
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
    at.started.push_back(sr.u64("started", 0, UINT64_MAX));
    if (slot_live(s.state) && s.pid <= 0)
      throw Error(ErrorCode::kBadMessage,
                  "job '" + job.id + "' slot " + std::to_string(i) + " is live without a pid");
    if (s.device >= 0 && !slot_live(s.state))
      throw Error(ErrorCode::kBadMessage, "job '" + job.id + "' slot " + std::to_string(i) +
                                              " holds device " + std::to_string(s.device) +
                                              " without a live process");
    job.slots.push_back(s);
  }
  if (jr.has("kv")) unpack_store(jr, job.kv, "job '" + job.id + "'");
  job.kv.forget_changes();  // as it is on disk
  return at;
}

// The leases, written beside the slots, must say the same.
void check_leases(const MapReader& top, const Loaded& l) {
  std::map<int64_t, std::pair<std::string, uint32_t>> held;
  for (const auto& [id, at] : l.jobs)
    for (uint32_t i = 0; i < at.job.slots.size(); ++i)
      if (at.job.slots[i].device >= 0) held[at.job.slots[i].device] = {id, i};
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

Loaded::Reply decode_reply(const msgpack::object& o, const std::string& what, bool* usable) {
  MapReader rr(o, what);
  Loaded::Reply r;
  // A routing id (ZeroMQ: at most 255 bytes), for a peer link with a zero
  // byte and its CURVE key (40 bytes of Z85) after it (ReplyCache::client_of).
  r.client = rr.bin("client", 255 + 1 + 40);
  // A reply belongs to its client's uid; one saved without it (an older
  // musterd) is not handed out to whoever presents the routing id.
  *usable = rr.has("uid");
  if (!*usable) return r;
  r.uid = rr.i64("uid", -1, UINT32_MAX);
  r.e.request_id = rr.u64("id", 0, UINT64_MAX);
  r.e.hash = rr.u64("hash", 0, UINT64_MAX);
  r.e.type = static_cast<uint16_t>(rr.u64("type", 0, 0xffff));
  r.e.frame = rr.bin("frame", ReplyCache::kMaxFrameBytes);
  return r;
}

void encode_reply(codec::Packer& p, const std::string& client, int64_t uid,
                  const ReplyCache::Entry& e) {
  p.pack_map(6);
  key(p, "client"), put_bin(p, client);
  key(p, "uid"), p.pack(uid);
  key(p, "id"), p.pack(e.request_id);
  key(p, "hash"), p.pack(e.hash);
  key(p, "type"), p.pack(e.type);
  key(p, "frame"), put_bin(p, e.frame);
}

void encode_marks(codec::Packer& p, const std::vector<DeviceMark>& marks) {
  p.pack_array(static_cast<uint32_t>(marks.size()));
  for (const auto& m : marks) {
    p.pack_map(4);
    key(p, "index"), p.pack(m.index);
    key(p, "uuid"), put_str(p, m.uuid);
    key(p, "drain"), put_str(p, m.drain);
    key(p, "failure"), put_str(p, m.failure);
  }
}

std::vector<DeviceMark> decode_marks(const MapReader& r) {
  std::vector<DeviceMark> out;
  const auto& a = r.array("devices", limits::kMaxDevices);
  for (uint32_t i = 0; i < a.size; ++i) {
    MapReader mr(a.ptr[i], "state.devices[" + std::to_string(i) + "]");
    out.push_back({mr.i64("index", 0, limits::kMaxDevices - 1), mr.str("uuid", 96),
                   mr.str("drain", 1024), mr.str("failure", 1024)});
  }
  return out;
}

// One job: its slots (with their pids' start times) and, for a snapshot,
// its store.
void encode_job(codec::Packer& p, const Job& job, const StartTime& started, bool with_store,
                const Spill& spill = nullptr) {
  p.pack_map((job.cluster ? 9 : 8) - (with_store ? 0 : 1) + !job.numa_binding.empty());
  key(p, "id"), put_str(p, job.id);
  if (!job.numa_binding.empty()) key(p, "numa"), put_str(p, job.numa_binding);
  key(p, "launcher"), p.pack(job.launcher_pid);
  key(p, "owner"), p.pack(job.owner_uid);
  if (job.cluster) {
    // A node's part of a multi-node job: where its world is, so that the
    // restarted daemon relays to the coordinator again and heartbeats.
    key(p, "cluster"), cluster_codec::pack_cluster(p, *job.cluster);
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
  if (!with_store) return;
  key(p, "kv"), pack_store(p, job.kv, spill);
}

}  // namespace

void pack_store(codec::Packer& p, const KeyValues& kv, const Spill& spill) {
  std::map<std::string_view, std::string_view> sorted(kv.begin(), kv.end());
  p.pack_array(static_cast<uint32_t>(sorted.size()));
  for (const auto& [k, v] : sorted) {
    p.pack_map(2);
    key(p, "k"), put_bin(p, k);
    key(p, "v"), put_bin(p, v);
    if (spill) spill();
  }
}

void unpack_store(const codec::MapReader& r, KeyValues& kv, const std::string& what) {
  const auto& a = r.array("kv", 1u << 24);
  for (uint32_t k = 0; k < a.size; ++k) {
    MapReader kr(a.ptr[k], what + " key " + std::to_string(k));
    kv.set(kr.bin("k", limits::kMaxStoreKeyBytes), kr.bin("v", limits::kMaxValueBytes));
  }
}

std::string encode_snapshot(const State& st, const ReplyCache& replies, uint64_t epoch,
                            const StartTime& started) {
  std::string out;
  encode_snapshot(st, replies, epoch, started, [&](std::string_view b) { out.append(b); });
  return out;
}

void encode_snapshot(const State& st, const ReplyCache& replies, uint64_t epoch,
                     const StartTime& started, const std::function<void(std::string_view)>& emit) {
  codec::Buffer buf;
  codec::Packer p(buf);
  const Spill spill = [&] {
    if (buf.size() < kSpillBytes) return;
    emit(std::string_view(buf.data(), buf.size()));
    buf.clear();
  };
  p.pack_map(9);
  key(p, "format"), put_str(p, kFormatName);
  key(p, "version"), p.pack(kFormatVersion);
  key(p, "epoch"), p.pack(epoch);
  key(p, "jobs"), p.pack_array(static_cast<uint32_t>(st.jobs().size()));
  for (const auto& [id, job] : st.jobs()) encode_job(p, job, started, true, spill), spill();
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
  key(p, "devices"), encode_marks(p, st.devices().marks());
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
  for (const auto& [c, uid, e] : saved) encode_reply(p, *c, uid, *e);
  const auto& runs = st.samplers().progress().all();
  key(p, "progress"), p.pack_array(static_cast<uint32_t>(runs.size()));
  for (const auto& [job, run] : runs) progress_codec::pack_run(p, job, run, started);
  const auto& rounds = st.cluster().rounds();
  key(p, "rounds"), p.pack_array(static_cast<uint32_t>(rounds.size()));
  for (const auto& [job, cj] : rounds) round_codec::pack_round(p, job, cj, true, spill);
  emit(std::string_view(buf.data(), buf.size()));
}

Loaded decode_snapshot(const std::string& bytes) {
  auto handle = unpack(bytes);
  MapReader top(handle.get(), "state");
  if (top.str("format", 64) != kFormatName)
    throw Error(ErrorCode::kBadMessage, "not a musterd state file");
  auto version = top.u64("version", 0, UINT64_MAX);
  if (version < kOldestVersion || version > kFormatVersion)
    throw Error(ErrorCode::kBadVersion,
                "format version " + std::to_string(version) + ", this musterd reads versions " +
                    std::to_string(kOldestVersion) + " to " + std::to_string(kFormatVersion));
  Loaded l;
  if (version >= 2) l.epoch = top.u64("epoch", 0, UINT64_MAX);
  const auto& jobs = top.array("jobs", 1u << 20);
  for (uint32_t j = 0; j < jobs.size; ++j) {
    auto at = decode_job(jobs.ptr[j], "state.jobs[" + std::to_string(j) + "]");
    std::string id = at.job.id;
    if (!l.jobs.emplace(id, std::move(at)).second)
      throw Error(ErrorCode::kBadMessage, "repeated job id '" + id + "'");
  }
  check(l);
  check_leases(top, l);
  if (version >= 3) l.marks = decode_marks(top);
  const auto& replies = top.array("replies", ReplyCache::kMaxSaved);
  for (uint32_t i = 0; i < replies.size; ++i) {
    bool usable = false;
    auto r = decode_reply(replies.ptr[i], "state.replies[" + std::to_string(i) + "]", &usable);
    if (usable) l.replies.push_back(std::move(r));
  }
  if (top.has("progress")) {  // from before resumable samplers: none
    const auto& runs = top.array("progress", 1u << 20);
    for (uint32_t i = 0; i < runs.size; ++i)
      l.progress.insert(
          progress_codec::decode_run(runs.ptr[i], "state.progress[" + std::to_string(i) + "]"));
  }
  if (version >= 4) {
    const auto& rounds = top.array("rounds", 1u << 20);
    for (uint32_t i = 0; i < rounds.size; ++i)
      l.rounds.insert(
          round_codec::decode_round(rounds.ptr[i], "state.rounds[" + std::to_string(i) + "]"));
  }
  return l;
}

void check(const Loaded& l) {
  std::map<int64_t, std::string> held;  // device -> job
  for (const auto& [id, at] : l.jobs)
    for (const auto& s : at.job.slots) {
      if (s.device < 0) continue;
      auto [it, fresh] = held.try_emplace(s.device, id);
      if (!fresh)
        throw Error(ErrorCode::kBadMessage,
                    "device " + std::to_string(s.device) + " is held by job '" + it->second +
                        "' and by job '" + id + "': a device is never leased twice");
    }
}

std::string job_header(const Job& job, const StartTime& started) {
  codec::Buffer buf;
  codec::Packer p(buf);
  encode_job(p, job, started, false);
  return bytes_of(buf);
}

std::string job_gone(const std::string& job) {
  codec::Buffer buf;
  codec::Packer p(buf);
  p.pack_map(1);
  key(p, "job"), put_str(p, job);
  return bytes_of(buf);
}

std::string key_set(const std::string& job, const std::string& k, const std::string& v) {
  codec::Buffer buf;
  codec::Packer p(buf);
  p.pack_map(3);
  key(p, "job"), put_str(p, job);
  key(p, "k"), put_bin(p, k);
  key(p, "v"), put_bin(p, v);
  return bytes_of(buf);
}

std::string key_gone(const std::string& job, const std::string& k) {
  codec::Buffer buf;
  codec::Packer p(buf);
  p.pack_map(2);
  key(p, "job"), put_str(p, job);
  key(p, "k"), put_bin(p, k);
  return bytes_of(buf);
}

std::string reply(const std::string& client, int64_t uid, const ReplyCache::Entry& e) {
  codec::Buffer buf;
  codec::Packer p(buf);
  encode_reply(p, client, uid, e);
  return bytes_of(buf);
}

std::string device_marks(const std::vector<DeviceMark>& marks) {
  codec::Buffer buf;
  codec::Packer p(buf);
  p.pack_map(1);
  key(p, "devices"), encode_marks(p, marks);
  return bytes_of(buf);
}

void apply(Loaded& l, uint8_t type, std::string_view payload) {
  auto handle = unpack(payload);
  const msgpack::object& o = handle.get();
  auto job_of = [&](const MapReader& r) -> Loaded::JobAt& {
    auto id = r.str("job", limits::kMaxJobIdBytes);
    auto it = l.jobs.find(id);
    if (it == l.jobs.end())
      throw Error(ErrorCode::kBadMessage, "a log record for job '" + id + "', which is not there");
    return it->second;
  };
  switch (type) {
    case kJob: {
      auto at = decode_job(o, "log: job");
      // The header replaces the one before; the store stays.
      if (auto it = l.jobs.find(at.job.id); it != l.jobs.end())
        at.job.kv = std::move(it->second.job.kv);
      std::string id = at.job.id;
      l.jobs[id] = std::move(at);
      return;
    }
    case kJobGone:
      l.jobs.erase(MapReader(o, "log: job gone").str("job", limits::kMaxJobIdBytes));
      return;
    case kKey: {
      MapReader r(o, "log: key");
      job_of(r).job.kv.set(r.bin("k", limits::kMaxStoreKeyBytes),
                           r.bin("v", limits::kMaxValueBytes));
      return;
    }
    case kKeyGone: {
      MapReader r(o, "log: key gone");
      job_of(r).job.kv.erase(r.bin("k", limits::kMaxStoreKeyBytes));
      return;
    }
    case kReply: {
      bool usable = false;
      auto r = decode_reply(o, "log: reply", &usable);
      if (usable) l.replies.push_back(std::move(r));
      return;
    }
    case kDevices:
      l.marks = decode_marks(MapReader(o, "log: devices"));
      return;
    case kProgress: {
      auto [job, run] = progress_codec::decode_run(o, "log: sampler progress");
      l.progress[job] = std::move(run);
      return;
    }
    case kProgressGone:
      l.progress.erase(progress_codec::decode_run_gone(o));
      return;
    case kRound:
    case kRoundGone:
    case kRoundKey:
    case kRoundKeyGone:
      return round_codec::apply(l.rounds, type, o);
    default:
      throw Error(ErrorCode::kBadMessage, "a log record of unknown type " + std::to_string(type));
  }
}

}  // namespace muster::daemon::state_codec
