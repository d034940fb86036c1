// One struct per protocol message (see doc/protocol.md for the table). Each has
// kType, pack() and a validating unpack(); field names on the wire are the
// member names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "protocol/codec.hpp"
#include "protocol/status_messages.hpp"
#include "protocol/wait_messages.hpp"

namespace muster::proto {

inline constexpr uint16_t kVersion = 1;

enum class MsgType : uint16_t {
  // requests
  kPing = 1,
  kJoin = 2,
  kLeave = 3,
  kReserve = 4,
  kAttach = 5,
  kStoreSet = 6,
  kStoreGet = 7,
  kStoreAdd = 8,
  kStoreCompareSet = 9,
  kStoreDelete = 10,
  kStoreWait = 11,
  kBarrier = 12,
  kStatus = 13,
  kStoreNumKeys = 14,
  kGpuDrain = 15,
  kShard = 20,
  // resumable samplers (sampler_messages.hpp)
  kSamplerCommit = 21,
  kSamplerResume = 22,
  // multi-node jobs (cluster_messages.hpp)
  kRendezvous = 30,
  kClusterState = 31,
  kNodeJoin = 40,
  kForward = 41,
  kHeartbeat = 42,
  kRankExited = 43,
  kNodeLeave = 44,
  kBarrierUp = 45,
  kJobWaits = 46,
  kNodeJoins = 47,
  // broadcast across nodes (cluster_messages.hpp)
  kBcastPush = 50,
  kBcastPull = 51,
  kBcastLeave = 52,
  // torch's newer Store API (store_messages.hpp)
  kStoreAppend = 60,
  kStoreMultiSet = 61,
  kStoreMultiGet = 62,
  kStoreQueuePush = 63,
  kStoreQueuePop = 64,
  kStoreQueueLen = 65,
  kStoreListKeys = 66,
  // replies
  kOk = 100,
  kErrorReply = 101,
  kPong = 102,
  kRankInfo = 103,
  kReserved = 104,
  kValue = 105,
  kInt = 106,
  kBool = 107,
  kStatusReply = 108,
  kShardReply = 110,
  kSamplerPlace = 111,
  kClusterStateReply = 131,
  kWorld = 140,
  kHeartbeatAck = 142,
  kJobWaitsReply = 146,
  kReplies = 147,
  kBcastChunk = 150,
  kValues = 160,
};

// The type's name, or nullptr for a type without a row in the message table
// (message_table.hpp).
const char* type_name(uint16_t type);

// The field list (fields.hpp) that pack() and unpack() walk is defined
// with the codec, not here.
#define MUSTER_FIELDS \
  template <class IO> \
  void fields(IO& io)
// A message of type Type named Name (a class template's name within it).
#define MUSTER_MESSAGE_AS(Name, Type)           \
  static constexpr MsgType kType = Type;        \
  void pack(codec::Packer& p) const;            \
  static Name unpack(const msgpack::object& o); \
  MUSTER_FIELDS;                                \
  bool operator==(const Name&) const = default
#define MUSTER_MESSAGE(Name) MUSTER_MESSAGE_AS(Name, MsgType::k##Name)

// The generation fence of store requests and barriers (optional on the wire,
// absent = no check): the generation of the caller's RankInfo. A job at
// another generation refuses the request with stale_generation.
using GenerationFence = std::optional<uint64_t>;

struct Ping {
  MUSTER_MESSAGE(Ping);
};

struct Pong {
  std::string version;
  int64_t pid = 0;
  MUSTER_MESSAGE(Pong);
};

// A process asks for its place in a job. A slot that `muster run` registered
// for this pid is returned as is; otherwise the daemon assigns a local rank
// (local_rank >= 0 is honoured when free).
struct Join {
  std::string job;
  uint32_t local_world_size = 1;
  bool wants_gpu = true;
  int64_t pid = 0;
  int64_t local_rank = -1;
  // Root only: whose job (absent: the sender's own); daemon/core/namespaces.cpp.
  std::optional<int64_t> owner = std::nullopt;
  MUSTER_MESSAGE(Join);
};

struct RankInfo {
  std::string job;
  uint32_t rank = 0;
  uint32_t local_rank = 0;
  uint32_t world_size = 1;
  uint32_t local_world_size = 1;
  uint32_t node_rank = 0;
  uint32_t num_nodes = 1;
  int64_t device = -1;  // leased GPU index, -1 for none
  uint64_t generation = 0;
  // The leased GPU's UUID as NVML names it ("GPU-…"), for select_device to
  // check the device CUDA opened; empty without a lease or a UUID.
  std::string device_uuid{};
  MUSTER_MESSAGE(RankInfo);
};

// Ends the caller's rank (pid + local rank: several threads of one process
// may hold ranks) and gives its lease back.
struct Leave {
  std::string job;
  int64_t pid = 0;
  uint32_t local_rank = 0;
  MUSTER_MESSAGE(Leave);
};

// The launcher books all local slots (and their GPUs) of a job before it
// starts any worker; the slots are held by launcher_pid until Attach.
struct Reserve {
  std::string job;
  uint32_t local_world_size = 1;
  bool wants_gpu = true;
  std::vector<int64_t> devices;  // allowed subset; empty = any the daemon hands out
  int64_t launcher_pid = 0;
  // The job's generation: muster run's restart count (optional on the wire,
  // 0 when absent).
  uint64_t generation = 0;
  std::optional<int64_t> owner = std::nullopt;  // as Join's (muster run --owner)
  MUSTER_MESSAGE(Reserve);
};

struct Reserved {
  uint64_t generation = 0;
  std::vector<int64_t> devices;  // by local rank; -1 = no device
  MUSTER_MESSAGE(Reserved);
};

// The launcher hands each reserved slot to its worker's pid (by local rank).
struct Attach {
  std::string job;
  std::vector<int64_t> pids;
  // What muster run pinned the workers to (--numa-binding): none, node or
  // socket; "" when the launcher does not say (older ones, other ones).
  std::string numa_binding{};
  MUSTER_MESSAGE(Attach);
};

// Store requests with the same fields share one declaration, a template
// instantiated per message type (each its own type, with its own kType).
#define MUSTER_SHAPE(Shape) MUSTER_MESSAGE_AS(Shape, T)

// A key and a value: set, append, queue_push.
template <MsgType T>
struct KeyValueRequest {
  std::string job;
  std::string key;
  std::string value;
  GenerationFence generation = std::nullopt;
  MUSTER_SHAPE(KeyValueRequest);
};

// A key, waited for up to timeout_ms: get, queue_pop. timeout_ms = 0:
// not_found at once when the key (or the queue's first value) is absent.
template <MsgType T>
struct KeyWaitRequest {
  std::string job;
  std::string key;
  int64_t timeout_ms = 0;
  GenerationFence generation = std::nullopt;
  MUSTER_SHAPE(KeyWaitRequest);
};

// A key alone: delete_key, queue_len.
template <MsgType T>
struct KeyRequest {
  std::string job;
  std::string key;
  GenerationFence generation = std::nullopt;
  MUSTER_SHAPE(KeyRequest);
};

// The keys that start with a prefix ("" = all): num_keys, list_keys.
template <MsgType T>
struct PrefixRequest {
  std::string job;
  std::string prefix;
  GenerationFence generation = std::nullopt;
  MUSTER_SHAPE(PrefixRequest);
};

using StoreSet = KeyValueRequest<MsgType::kStoreSet>;
using StoreGet = KeyWaitRequest<MsgType::kStoreGet>;
using StoreDelete = KeyRequest<MsgType::kStoreDelete>;
// torch's num_keys, for a store that keeps its keys under a prefix of the
// job's store.
using StoreNumKeys = PrefixRequest<MsgType::kStoreNumKeys>;

// Adds delta to the decimal integer stored at key (torch's Store.add).
struct StoreAdd {
  std::string job;
  std::string key;
  int64_t delta = 0;
  GenerationFence generation = std::nullopt;
  MUSTER_MESSAGE(StoreAdd);
};

// torch's compare_set: sets desired when the current value equals expected
// (or when the key is absent and expected is empty); replies the value after.
struct StoreCompareSet {
  std::string job;
  std::string key;
  std::string expected;
  std::string desired;
  GenerationFence generation = std::nullopt;
  MUSTER_MESSAGE(StoreCompareSet);
};

struct StoreWait {
  std::string job;
  std::vector<std::string> keys;
  int64_t timeout_ms = 0;
  GenerationFence generation = std::nullopt;
  MUSTER_MESSAGE(StoreWait);
};

// Completes when every rank of the job has entered the barrier of this name.
struct Barrier {
  std::string job;
  uint32_t rank = 0;
  std::string name;
  int64_t timeout_ms = 0;
  GenerationFence generation = std::nullopt;
  MUSTER_MESSAGE(Barrier);
};

// job (optional): only that job (unknown_job when the caller may not see
// it); for a job that spans nodes, its waits as its coordinator sees them.
struct Status {
  std::string job{};
  MUSTER_MESSAGE(Status);
};

// Root (or the daemon's own uid) drains a GPU: its holder keeps it until
// its rank ends, nobody is given it after; drain = false undrains it (and
// forgets a critical XID's quarantine: the GPU was reset). Saved with the
// daemon's state.
struct GpuDrain {
  uint32_t device = 0;  // NVML index
  bool drain = true;
  std::string reason;  // why, shown by status; required when draining
  MUSTER_MESSAGE(GpuDrain);
};

struct Ok {
  MUSTER_MESSAGE(Ok);
};

struct ErrorReply {
  uint16_t code = 0;
  std::string message;
  MUSTER_MESSAGE(ErrorReply);
};

struct Value {
  std::string value;
  MUSTER_MESSAGE(Value);
};

struct Int {
  int64_t value = 0;
  MUSTER_MESSAGE(Int);
};

struct Bool {
  bool value = false;
  MUSTER_MESSAGE(Bool);
};

struct StatusReply {
  std::string version;
  int64_t pid = 0;
  double uptime_s = 0;
  std::vector<DeviceStatus> devices;
  std::vector<JobStatus> jobs;
  // Requests other daemons sent this one (multi-node); optional on the wire.
  uint64_t peer_requests = 0;
  // How the daemon keeps a job's processes together: "cgroup DIR" or
  // "guardian (WHY)"; optional on the wire.
  std::string containment{};
  // Where the daemon's GPUs come from: "nvml", "cuda", "simulated" or
  // "none"; optional on the wire (empty from older daemons).
  std::string gpu_source{};
  // Jobs the reply left out to stay within its bound (others' after the
  // caller's own); optional on the wire.
  uint64_t jobs_left_out = 0;
  MUSTER_MESSAGE(StatusReply);
};

inline constexpr uint64_t kMaxDatasetSize = uint64_t{1} << 40;

// This rank's share of torch's DistributedSampler for one epoch (world size =
// the job's). Requires rank < the job's world size (checked by the daemon).
struct Shard {
  std::string job;
  uint32_t rank = 0;
  uint64_t dataset_size = 0;  // 0..kMaxDatasetSize
  uint64_t epoch = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
  // Indices of the epoch's permutation already used (resumption, <= dataset_size); 0 = torch's.
  uint64_t consumed = 0;
  MUSTER_MESSAGE(Shard);
};

// The shard's indices as little-endian unsigned integers of `width` bytes
// (4 when dataset_size <= 2^32, else 8), in sampler order.
struct ShardReply {
  uint64_t count = 0;
  uint32_t width = 4;
  std::string indices;  // count * width bytes
  MUSTER_MESSAGE(ShardReply);
  // Everything pack() writes but the indices' `bytes` bytes, which must
  // follow: lets the daemon write a multi-MB shard straight into the frame.
  static void pack_head(codec::Packer& p, uint64_t count, uint32_t width, size_t bytes);
};

}  // namespace muster::proto
