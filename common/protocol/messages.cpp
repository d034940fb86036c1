#include "protocol/messages.hpp"

#include "protocol/cluster_messages.hpp"
#include "protocol/limits.hpp"

namespace muster::proto {

using codec::MapReader;
using codec::put_bin;
using codec::put_str;

namespace {

using limits::kMaxPid;
constexpr uint32_t kU32Max = 0xffffffffu;

void put_ints(codec::Packer& p, const std::vector<int64_t>& v) {
  p.pack_array(static_cast<uint32_t>(v.size()));
  for (auto x : v) p.pack(x);
}

// Job ids appear in logs, status tables and file names: keep them printable.
std::string job_id(const MapReader& r) {
  auto id = r.str("job", limits::kMaxJobIdBytes);
  if (id.empty()) throw Error(ErrorCode::kInvalidArgument, "job id must not be empty");
  for (unsigned char c : id)
    if (!(std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == ':' || c == '@' || c == '+'))
      throw Error(ErrorCode::kInvalidArgument,
                  "job id '" + id + "' may hold only letters, digits and - _ . : @ +");
  return id;
}

std::string store_key(const MapReader& r, const char* name = "key") {
  auto k = r.str(name, limits::kMaxKeyBytes);
  if (k.empty()) throw Error(ErrorCode::kInvalidArgument, "store key must not be empty");
  return k;
}

int64_t timeout(const MapReader& r) {
  return r.i64("timeout_ms", 0, limits::kMaxTimeoutMs);
}
int64_t read_pid(const MapReader& r, const char* name) {
  return r.i64(name, 1, kMaxPid);
}
// The optional generation fence of store requests and barriers.
void put_generation(codec::Packer& p, const std::optional<uint64_t>& g) {
  if (g) codec::key(p, "generation"), p.pack(*g);
}
std::optional<uint64_t> read_generation(const MapReader& r) {
  if (!r.has("generation")) return std::nullopt;
  return r.u64("generation", 0, UINT64_MAX);
}
uint32_t world(const MapReader& r) {
  return static_cast<uint32_t>(r.u64("local_world_size", 1, limits::kMaxLocalWorldSize));
}

}  // namespace

std::string read_job_id(const MapReader& r) {
  return job_id(r);
}

void Ping::pack(codec::Packer& p) const {
  p.pack_map(0);
}
Ping Ping::unpack(const msgpack::object& o) {
  MapReader r(o, "ping");
  return {};
}

void Pong::pack(codec::Packer& p) const {
  p.pack_map(2);
  codec::key(p, "version"), put_str(p, version);
  codec::key(p, "pid"), p.pack(pid);
}
Pong Pong::unpack(const msgpack::object& o) {
  MapReader r(o, "pong");
  return {r.str("version", 256), r.i64("pid", 0, kMaxPid)};
}

void Join::pack(codec::Packer& p) const {
  p.pack_map(5);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "local_world_size"), p.pack(local_world_size);
  codec::key(p, "wants_gpu"), p.pack(wants_gpu);
  codec::key(p, "pid"), p.pack(pid);
  codec::key(p, "local_rank"), p.pack(local_rank);
}
Join Join::unpack(const msgpack::object& o) {
  MapReader r(o, "join");
  Join m;
  m.job = job_id(r);
  m.local_world_size = world(r);
  m.wants_gpu = r.boolean("wants_gpu");
  m.pid = read_pid(r, "pid");
  m.local_rank = r.i64("local_rank", -1, m.local_world_size - 1);
  return m;
}

void RankInfo::pack(codec::Packer& p) const {
  p.pack_map(9);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "rank"), p.pack(rank);
  codec::key(p, "local_rank"), p.pack(local_rank);
  codec::key(p, "world_size"), p.pack(world_size);
  codec::key(p, "local_world_size"), p.pack(local_world_size);
  codec::key(p, "node_rank"), p.pack(node_rank);
  codec::key(p, "num_nodes"), p.pack(num_nodes);
  codec::key(p, "device"), p.pack(device);
  codec::key(p, "generation"), p.pack(generation);
}
RankInfo RankInfo::unpack(const msgpack::object& o) {
  MapReader r(o, "rank_info");
  RankInfo m;
  m.job = job_id(r);
  m.world_size = static_cast<uint32_t>(r.u64("world_size", 1, kU32Max));
  m.rank = static_cast<uint32_t>(r.u64("rank", 0, m.world_size - 1));
  m.local_world_size = static_cast<uint32_t>(r.u64("local_world_size", 1, m.world_size));
  m.local_rank = static_cast<uint32_t>(r.u64("local_rank", 0, m.local_world_size - 1));
  m.num_nodes = static_cast<uint32_t>(r.u64("num_nodes", 1, kU32Max));
  m.node_rank = static_cast<uint32_t>(r.u64("node_rank", 0, m.num_nodes - 1));
  m.device = r.i64("device", -1, limits::kMaxDevices - 1);
  m.generation = r.u64("generation", 0, UINT64_MAX);
  return m;
}

void Leave::pack(codec::Packer& p) const {
  p.pack_map(3);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "pid"), p.pack(pid);
  codec::key(p, "local_rank"), p.pack(local_rank);
}
Leave Leave::unpack(const msgpack::object& o) {
  MapReader r(o, "leave");
  return {job_id(r), read_pid(r, "pid"),
          static_cast<uint32_t>(r.u64("local_rank", 0, limits::kMaxLocalWorldSize - 1))};
}

void Reserve::pack(codec::Packer& p) const {
  // generation 0 is left out: the frame is then the one older peers know.
  p.pack_map(generation ? 6 : 5);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "local_world_size"), p.pack(local_world_size);
  codec::key(p, "wants_gpu"), p.pack(wants_gpu);
  codec::key(p, "devices"), put_ints(p, devices);
  codec::key(p, "launcher_pid"), p.pack(launcher_pid);
  if (generation) codec::key(p, "generation"), p.pack(generation);
}
Reserve Reserve::unpack(const msgpack::object& o) {
  MapReader r(o, "reserve");
  Reserve m;
  m.job = job_id(r);
  m.local_world_size = world(r);
  m.wants_gpu = r.boolean("wants_gpu");
  m.devices = r.int_list("devices", limits::kMaxDevices, 0, limits::kMaxDevices - 1);
  m.launcher_pid = read_pid(r, "launcher_pid");
  if (r.has("generation")) m.generation = r.u64("generation", 0, kU32Max);
  return m;
}

void Reserved::pack(codec::Packer& p) const {
  p.pack_map(2);
  codec::key(p, "generation"), p.pack(generation);
  codec::key(p, "devices"), put_ints(p, devices);
}
Reserved Reserved::unpack(const msgpack::object& o) {
  MapReader r(o, "reserved");
  return {r.u64("generation", 0, UINT64_MAX),
          r.int_list("devices", limits::kMaxLocalWorldSize, -1, limits::kMaxDevices - 1)};
}

void Attach::pack(codec::Packer& p) const {
  p.pack_map(2);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "pids"), put_ints(p, pids);
}
Attach Attach::unpack(const msgpack::object& o) {
  MapReader r(o, "attach");
  return {job_id(r), r.int_list("pids", limits::kMaxLocalWorldSize, 1, kMaxPid)};
}

void StoreSet::pack(codec::Packer& p) const {
  p.pack_map(generation ? 4 : 3);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "key"), put_str(p, this->key);
  codec::key(p, "value"), put_bin(p, value);
  put_generation(p, generation);
}
StoreSet StoreSet::unpack(const msgpack::object& o) {
  MapReader r(o, "store_set");
  return {job_id(r), store_key(r), r.bin("value", limits::kMaxValueBytes), read_generation(r)};
}

void StoreGet::pack(codec::Packer& p) const {
  p.pack_map(generation ? 4 : 3);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "key"), put_str(p, key);
  codec::key(p, "timeout_ms"), p.pack(timeout_ms);
  put_generation(p, generation);
}
StoreGet StoreGet::unpack(const msgpack::object& o) {
  MapReader r(o, "store_get");
  return {job_id(r), store_key(r), timeout(r), read_generation(r)};
}

void StoreAdd::pack(codec::Packer& p) const {
  p.pack_map(generation ? 4 : 3);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "key"), put_str(p, key);
  codec::key(p, "delta"), p.pack(delta);
  put_generation(p, generation);
}
StoreAdd StoreAdd::unpack(const msgpack::object& o) {
  MapReader r(o, "store_add");
  return {job_id(r), store_key(r), r.i64("delta", INT64_MIN, INT64_MAX), read_generation(r)};
}

void StoreCompareSet::pack(codec::Packer& p) const {
  p.pack_map(generation ? 5 : 4);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "key"), put_str(p, key);
  codec::key(p, "expected"), put_bin(p, expected);
  codec::key(p, "desired"), put_bin(p, desired);
  put_generation(p, generation);
}
StoreCompareSet StoreCompareSet::unpack(const msgpack::object& o) {
  MapReader r(o, "store_compare_set");
  return {job_id(r), store_key(r), r.bin("expected", limits::kMaxValueBytes),
          r.bin("desired", limits::kMaxValueBytes), read_generation(r)};
}

void StoreDelete::pack(codec::Packer& p) const {
  p.pack_map(generation ? 3 : 2);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "key"), put_str(p, key);
  put_generation(p, generation);
}
StoreDelete StoreDelete::unpack(const msgpack::object& o) {
  MapReader r(o, "store_delete");
  return {job_id(r), store_key(r), read_generation(r)};
}

void StoreWait::pack(codec::Packer& p) const {
  p.pack_map(generation ? 4 : 3);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "keys"), p.pack_array(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) put_str(p, k);
  codec::key(p, "timeout_ms"), p.pack(timeout_ms);
  put_generation(p, generation);
}
StoreWait StoreWait::unpack(const msgpack::object& o) {
  MapReader r(o, "store_wait");
  StoreWait m{job_id(r), r.str_list("keys", limits::kMaxWaitKeys, limits::kMaxKeyBytes), timeout(r),
              read_generation(r)};
  if (m.keys.empty()) throw Error(ErrorCode::kInvalidArgument, "store_wait needs at least one key");
  for (const auto& k : m.keys)
    if (k.empty()) throw Error(ErrorCode::kInvalidArgument, "store key must not be empty");
  return m;
}

void Barrier::pack(codec::Packer& p) const {
  p.pack_map(generation ? 5 : 4);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "rank"), p.pack(rank);
  codec::key(p, "name"), put_str(p, name);
  codec::key(p, "timeout_ms"), p.pack(timeout_ms);
  put_generation(p, generation);
}
Barrier Barrier::unpack(const msgpack::object& o) {
  MapReader r(o, "barrier");
  return {job_id(r), static_cast<uint32_t>(r.u64("rank", 0, kU32Max)),
          r.str("name", limits::kMaxKeyBytes), timeout(r), read_generation(r)};
}

void Status::pack(codec::Packer& p) const {
  p.pack_map(0);
}
Status Status::unpack(const msgpack::object& o) {
  MapReader r(o, "status");
  return {};
}

void Ok::pack(codec::Packer& p) const {
  p.pack_map(0);
}
Ok Ok::unpack(const msgpack::object& o) {
  MapReader r(o, "ok");
  return {};
}

void ErrorReply::pack(codec::Packer& p) const {
  p.pack_map(2);
  codec::key(p, "code"), p.pack(code);
  codec::key(p, "message"), put_str(p, message);
}
ErrorReply ErrorReply::unpack(const msgpack::object& o) {
  MapReader r(o, "error");
  return {static_cast<uint16_t>(r.u64("code", 1, 0xffff)), r.str("message", 64 << 10)};
}

void Value::pack(codec::Packer& p) const {
  p.pack_map(1);
  codec::key(p, "value"), put_bin(p, value);
}
Value Value::unpack(const msgpack::object& o) {
  MapReader r(o, "value");
  return {r.bin("value", limits::kMaxValueBytes)};
}

void Int::pack(codec::Packer& p) const {
  p.pack_map(1);
  codec::key(p, "value"), p.pack(value);
}
Int Int::unpack(const msgpack::object& o) {
  MapReader r(o, "int");
  return {r.i64("value", INT64_MIN, INT64_MAX)};
}

void Bool::pack(codec::Packer& p) const {
  p.pack_map(1);
  codec::key(p, "value"), p.pack(value);
}
Bool Bool::unpack(const msgpack::object& o) {
  MapReader r(o, "bool");
  return {r.boolean("value")};
}

void StatusReply::pack(codec::Packer& p) const {
  p.pack_map(6);
  codec::key(p, "peer_requests"), p.pack(peer_requests);
  codec::key(p, "version"), put_str(p, version);
  codec::key(p, "pid"), p.pack(pid);
  codec::key(p, "uptime_s"), p.pack(uptime_s);
  codec::key(p, "devices"), p.pack_array(static_cast<uint32_t>(devices.size()));
  for (const auto& d : devices) {
    p.pack_map(6);
    codec::key(p, "index"), p.pack(d.index);
    codec::key(p, "name"), put_str(p, d.name);
    codec::key(p, "job"), put_str(p, d.job);
    codec::key(p, "rank"), p.pack(d.rank);
    codec::key(p, "pid"), p.pack(d.pid);
    codec::key(p, "in_use"), p.pack(d.in_use);
  }
  codec::key(p, "jobs"), p.pack_array(static_cast<uint32_t>(jobs.size()));
  for (const auto& j : jobs) {
    p.pack_map(6);
    codec::key(p, "uid"), p.pack(j.uid);
    codec::key(p, "id"), put_str(p, j.id);
    codec::key(p, "generation"), p.pack(j.generation);
    codec::key(p, "world_size"), p.pack(j.world_size);
    codec::key(p, "local_world_size"), p.pack(j.local_world_size);
    codec::key(p, "ranks"), p.pack_array(static_cast<uint32_t>(j.ranks.size()));
    for (const auto& rk : j.ranks) {
      p.pack_map(5);
      codec::key(p, "rank"), p.pack(rk.rank);
      codec::key(p, "local_rank"), p.pack(rk.local_rank);
      codec::key(p, "pid"), p.pack(rk.pid);
      codec::key(p, "device"), p.pack(rk.device);
      codec::key(p, "state"), put_str(p, rk.state);
    }
  }
}
StatusReply StatusReply::unpack(const msgpack::object& o) {
  MapReader r(o, "status_reply");
  StatusReply m;
  m.version = r.str("version", 256);
  m.pid = r.i64("pid", 0, kMaxPid);
  m.uptime_s = r.f64("uptime_s");
  if (r.has("peer_requests")) m.peer_requests = r.u64("peer_requests", 0, UINT64_MAX);
  const auto& devs = r.array("devices", limits::kMaxDevices);
  for (uint32_t i = 0; i < devs.size; ++i) {
    MapReader d(devs.ptr[i], "status_reply.devices[]");
    m.devices.push_back({static_cast<uint32_t>(d.u64("index", 0, limits::kMaxDevices - 1)),
                         d.str("name", 256), d.str("job", limits::kMaxJobIdBytes),
                         d.i64("rank", -1, kU32Max), d.i64("pid", 0, kMaxPid)});
    // Optional on the wire (older daemons): a device with a job is in use.
    m.devices.back().in_use = d.has("in_use") ? d.boolean("in_use") : !m.devices.back().job.empty();
  }
  const auto& jobs = r.array("jobs", 1u << 20);
  for (uint32_t i = 0; i < jobs.size; ++i) {
    MapReader j(jobs.ptr[i], "status_reply.jobs[]");
    JobStatus js;
    js.id = j.str("id", limits::kMaxJobIdBytes);
    js.generation = j.u64("generation", 0, UINT64_MAX);
    js.world_size = static_cast<uint32_t>(j.u64("world_size", 0, kU32Max));
    js.local_world_size = static_cast<uint32_t>(j.u64("local_world_size", 0, kU32Max));
    if (j.has("uid")) js.uid = j.i64("uid", -1, kU32Max);
    const auto& ranks = j.array("ranks", limits::kMaxLocalWorldSize);
    for (uint32_t k = 0; k < ranks.size; ++k) {
      MapReader rr(ranks.ptr[k], "status_reply.jobs[].ranks[]");
      js.ranks.push_back({static_cast<uint32_t>(rr.u64("rank", 0, kU32Max)),
                          static_cast<uint32_t>(rr.u64("local_rank", 0, kU32Max)),
                          rr.i64("pid", 0, kMaxPid), rr.i64("device", -1, limits::kMaxDevices - 1),
                          rr.str("state", 32)});
    }
    m.jobs.push_back(std::move(js));
  }
  return m;
}

void Shard::pack(codec::Packer& p) const {
  p.pack_map(7);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "rank"), p.pack(rank);
  codec::key(p, "dataset_size"), p.pack(dataset_size);
  codec::key(p, "epoch"), p.pack(epoch);
  codec::key(p, "seed"), p.pack(seed);
  codec::key(p, "shuffle"), p.pack(shuffle);
  codec::key(p, "drop_last"), p.pack(drop_last);
}
Shard Shard::unpack(const msgpack::object& o) {
  MapReader r(o, "shard");
  Shard m;
  m.job = job_id(r);
  m.rank = static_cast<uint32_t>(r.u64("rank", 0, kU32Max));
  m.dataset_size = r.u64("dataset_size", 0, kMaxDatasetSize);
  m.epoch = r.u64("epoch", 0, UINT64_MAX);
  m.seed = r.u64("seed", 0, UINT64_MAX);
  m.shuffle = r.boolean("shuffle");
  m.drop_last = r.boolean("drop_last");
  return m;
}

void ShardReply::pack_head(codec::Packer& p, uint64_t count, uint32_t width, size_t bytes) {
  p.pack_map(3);
  codec::key(p, "count"), p.pack(count);
  codec::key(p, "width"), p.pack(width);
  codec::key(p, "indices"), p.pack_bin(static_cast<uint32_t>(bytes));
}
void ShardReply::pack(codec::Packer& p) const {
  pack_head(p, count, width, indices.size());
  p.pack_bin_body(indices.data(), static_cast<uint32_t>(indices.size()));
}
ShardReply ShardReply::unpack(const msgpack::object& o) {
  MapReader r(o, "shard_reply");
  ShardReply m;
  m.width = static_cast<uint32_t>(r.u64("width", 4, 8));
  if (m.width != 4 && m.width != 8)
    throw Error(ErrorCode::kBadMessage, "shard_reply.width must be 4 or 8");
  m.count = r.u64("count", 0, limits::kMaxFrameBytes / m.width);
  m.indices = r.bin("indices", limits::kMaxFrameBytes);
  if (m.indices.size() != m.count * m.width)
    throw Error(ErrorCode::kBadMessage,
                "shard_reply.indices holds " + std::to_string(m.indices.size()) + " bytes, not " +
                    std::to_string(m.count) + " x " + std::to_string(m.width));
  return m;
}

}  // namespace muster::proto
