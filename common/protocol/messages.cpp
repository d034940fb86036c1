// The field lists of the messages of one node (messages.hpp), and the pack()
// and unpack() that walk them (fields.hpp).
#include "protocol/messages.hpp"

#include <algorithm>
#include <cctype>

#include "job_id.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/fields.hpp"
#include "protocol/limits.hpp"

namespace muster::proto {

void wire::check_job_id(const std::string& id) {
  // The charset is job_id.hpp's, the launcher's too. A daemon's key of the
  // job (its name, '~', its owner) passes here: daemons speak of jobs by
  // key, and a local request's name is held to job_id_problem before the
  // daemon makes it a key (daemon/core/namespaces.cpp).
  if (auto why = job_key_problem(id); !why.empty()) throw Error(ErrorCode::kInvalidArgument, why);
}

void wire::check_store_key(const std::string& key) {
  if (key.empty()) throw Error(ErrorCode::kInvalidArgument, "store key must not be empty");
}

void wire::check_store_keys(const std::vector<std::string>& keys) {
  size_t total = 0;
  for (const auto& k : keys) {
    check_store_key(k);
    total += k.size();
  }
  if (total > limits::kMaxStoreKeysBytes)
    throw Error(ErrorCode::kTooLarge, "the keys of one request take " + std::to_string(total) +
                                          " bytes, over muster's limit of " +
                                          std::to_string(limits::kMaxStoreKeysBytes) +
                                          " bytes together (a protocol limit: split the request)");
}

std::string read_job_id(const codec::MapReader& r) {
  auto id = r.str("job", limits::kMaxJobIdBytes);
  wire::check_job_id(id);
  return id;
}

template <class IO>
void Ping::fields(IO&) {}
template <class IO>
void Status::fields(IO& io) {
  io.str("job", job, limits::kMaxJobIdBytes, wire::kUnlessDefault);
  io.check([&] {
    if (!job.empty()) wire::check_job_id(job);
  });
}
template <class IO>
void Ok::fields(IO&) {}

template <class IO>
void GpuDrain::fields(IO& io) {
  io.num("device", device, 0, limits::kMaxDevices - 1);
  io.boolean("drain", drain);
  io.str("reason", reason, 1024);
  io.check([&] {
    if (drain && reason.empty())
      throw Error(ErrorCode::kInvalidArgument, "a drain needs a reason (--reason TEXT)");
  });
}

template <class IO>
void Pong::fields(IO& io) {
  io.str("version", version, 256);
  io.num("pid", pid, 0, limits::kMaxPid);
}

template <class IO>
void Join::fields(IO& io) {
  io.job(job);
  io.num("local_world_size", local_world_size, 1, limits::kMaxLocalWorldSize);
  io.boolean("wants_gpu", wants_gpu);
  io.pid("pid", pid);
  io.num("local_rank", local_rank, -1, local_world_size - 1);
  io.num("owner", owner, 0, kU32Max, wire::kUnlessDefault);
}

template <class IO>
void RankInfo::fields(IO& io) {
  io.job(job);
  io.num("world_size", world_size, 1, kU32Max);
  io.num("rank", rank, 0, world_size - 1);
  io.num("local_world_size", local_world_size, 1, world_size);
  io.num("local_rank", local_rank, 0, local_world_size - 1);
  io.num("num_nodes", num_nodes, 1, kU32Max);
  io.num("node_rank", node_rank, 0, num_nodes - 1);
  io.num("device", device, -1, limits::kMaxDevices - 1);
  io.generation(generation);
  io.str("device_uuid", device_uuid, limits::kMaxDeviceUuidBytes, wire::kUnlessDefault);
}

template <class IO>
void Leave::fields(IO& io) {
  io.job(job);
  io.pid("pid", pid);
  io.num("local_rank", local_rank, 0, limits::kMaxLocalWorldSize - 1);
}

template <class IO>
void Reserve::fields(IO& io) {
  io.job(job);
  io.num("local_world_size", local_world_size, 1, limits::kMaxLocalWorldSize);
  io.boolean("wants_gpu", wants_gpu);
  io.ints("devices", devices, limits::kMaxDevices, 0, limits::kMaxDevices - 1);
  io.pid("launcher_pid", launcher_pid);
  io.num("generation", generation, 0, kU32Max, wire::kUnlessDefault);
  io.num("owner", owner, 0, kU32Max, wire::kUnlessDefault);
}

template <class IO>
void Reserved::fields(IO& io) {
  io.generation(generation);
  io.ints("devices", devices, limits::kMaxLocalWorldSize, -1, limits::kMaxDevices - 1);
}

template <class IO>
void Attach::fields(IO& io) {
  io.job(job);
  io.ints("pids", pids, limits::kMaxLocalWorldSize, 1, limits::kMaxPid);
  io.str("numa_binding", numa_binding, 16, wire::kAddedLater);
  io.check([&] {
    if (!numa_binding.empty() && numa_binding != "none" && numa_binding != "node" &&
        numa_binding != "socket")
      throw Error(ErrorCode::kInvalidArgument,
                  "attach: numa_binding '" + numa_binding + "' is none of none, node, socket");
  });
}

template <class IO>
void StoreAdd::fields(IO& io) {
  fenced(io, *this, [&] {
    io.store_key(key);
    io.num("delta", delta, INT64_MIN, INT64_MAX);
  });
}

template <class IO>
void StoreCompareSet::fields(IO& io) {
  fenced(io, *this, [&] {
    io.store_key(key);
    io.bin("expected", expected, limits::kMaxValueBytes);
    io.bin("desired", desired, limits::kMaxValueBytes);
  });
}

template <class IO>
void StoreWait::fields(IO& io) {
  fenced(io, *this, [&] {
    io.strs("keys", keys, limits::kMaxWaitKeys, limits::kMaxStoreKeyBytes);
    io.ms("timeout_ms", timeout_ms);
  });
  io.check([&] {
    if (keys.empty()) throw Error(ErrorCode::kInvalidArgument, "store_wait needs at least one key");
    wire::check_store_keys(keys);
  });
}

template <class IO>
void Barrier::fields(IO& io) {
  fenced(io, *this, [&] {
    io.num("rank", rank, 0, kU32Max);
    io.str("name", name, limits::kMaxKeyBytes);
    io.ms("timeout_ms", timeout_ms);
  });
}

template <class IO>
void ErrorReply::fields(IO& io) {
  io.num("code", code, 1, 0xffff);
  io.str("message", message, 64 << 10);
}

template <class IO>
void Value::fields(IO& io) {
  io.bin("value", value, limits::kMaxValueBytes);
}

template <class IO>
void Int::fields(IO& io) {
  io.num("value", value, INT64_MIN, INT64_MAX);
}

template <class IO>
void Bool::fields(IO& io) {
  io.boolean("value", value);
}

template <class IO>
void StatusReply::fields(IO& io) {
  io.str("version", version, 256);
  io.num("pid", pid, 0, limits::kMaxPid);
  io.real("uptime_s", uptime_s);
  io.num("peer_requests", peer_requests, 0, UINT64_MAX, wire::kAddedLater);
  io.str("containment", containment, 4096, wire::kAddedLater);
  io.str("gpu_source", gpu_source, 32, wire::kAddedLater);
  io.list("devices", devices, limits::kMaxDevices);
  io.list("jobs", jobs, 1u << 20);
  io.num("jobs_left_out", jobs_left_out, 0, UINT64_MAX, wire::kUnlessDefault);
}

template <class IO>
void Shard::fields(IO& io) {
  io.job(job);
  io.num("rank", rank, 0, kU32Max);
  io.num("dataset_size", dataset_size, 0, kMaxDatasetSize);
  io.num("epoch", epoch, 0, UINT64_MAX);
  io.num("seed", seed, 0, UINT64_MAX);
  io.boolean("shuffle", shuffle);
  io.boolean("drop_last", drop_last);
  io.num("consumed", consumed, 0, kMaxDatasetSize, wire::kUnlessDefault);
}

template <class IO>
void ShardReply::fields(IO& io) {
  io.num("width", width, 4, 8);
  io.check([&] {
    if (width != 4 && width != 8)
      throw Error(ErrorCode::kBadMessage, "shard_reply.width must be 4 or 8");
  });
  io.num("count", count, 0, limits::kMaxFrameBytes / std::max(width, 1u));
  io.tail("indices", indices, limits::kMaxFrameBytes);
  io.check([&] {
    if (indices.size() != count * width)
      throw Error(ErrorCode::kBadMessage,
                  "shard_reply.indices holds " + std::to_string(indices.size()) + " bytes, not " +
                      std::to_string(count) + " x " + std::to_string(width));
  });
}

void ShardReply::pack_head(codec::Packer& p, uint64_t count, uint32_t width, size_t bytes) {
  wire::pack_fields(p, ShardReply{count, width, {}}, bytes);
}

// The shared store request shapes (messages.hpp), one field list each.
template <MsgType T>
template <class IO>
void KeyValueRequest<T>::fields(IO& io) {
  fenced(io, *this, [&] {
    io.store_key(key);
    io.bin("value", value, limits::kMaxValueBytes);
  });
}

template <MsgType T>
template <class IO>
void KeyWaitRequest<T>::fields(IO& io) {
  fenced(io, *this, [&] {
    io.store_key(key);
    io.ms("timeout_ms", timeout_ms);
  });
}

template <MsgType T>
template <class IO>
void KeyRequest<T>::fields(IO& io) {
  fenced(io, *this, [&] { io.store_key(key); });
}

template <MsgType T>
template <class IO>
void PrefixRequest<T>::fields(IO& io) {
  fenced(io, *this, [&] { io.str("prefix", prefix, limits::kMaxStoreKeyBytes); });
}

MUSTER_CODEC_OF(template <MsgType T>, KeyValueRequest<T>)
MUSTER_CODEC_OF(template <MsgType T>, KeyWaitRequest<T>)
MUSTER_CODEC_OF(template <MsgType T>, KeyRequest<T>)
MUSTER_CODEC_OF(template <MsgType T>, PrefixRequest<T>)

template struct KeyValueRequest<MsgType::kStoreSet>;
template struct KeyValueRequest<MsgType::kStoreAppend>;
template struct KeyValueRequest<MsgType::kStoreQueuePush>;
template struct KeyWaitRequest<MsgType::kStoreGet>;
template struct KeyWaitRequest<MsgType::kStoreQueuePop>;
template struct KeyRequest<MsgType::kStoreDelete>;
template struct KeyRequest<MsgType::kStoreQueueLen>;
template struct PrefixRequest<MsgType::kStoreNumKeys>;
template struct PrefixRequest<MsgType::kStoreListKeys>;

MUSTER_CODEC(Ping)
MUSTER_CODEC(Pong)
MUSTER_CODEC(Join)
MUSTER_CODEC(RankInfo)
MUSTER_CODEC(Leave)
MUSTER_CODEC(Reserve)
MUSTER_CODEC(Reserved)
MUSTER_CODEC(Attach)
MUSTER_CODEC(StoreAdd)
MUSTER_CODEC(StoreCompareSet)
MUSTER_CODEC(StoreWait)
MUSTER_CODEC(Barrier)
MUSTER_CODEC(Status)
MUSTER_CODEC(GpuDrain)
MUSTER_CODEC(Ok)
MUSTER_CODEC(ErrorReply)
MUSTER_CODEC(Value)
MUSTER_CODEC(Int)
MUSTER_CODEC(Bool)
MUSTER_CODEC(Shard)
MUSTER_CODEC(StatusReply)
MUSTER_CODEC(ShardReply)

}  // namespace muster::proto
