// The field lists of the messages between nodes (cluster_messages.hpp).
#include "protocol/cluster_messages.hpp"

#include <algorithm>

#include "protocol/fields.hpp"
#include "protocol/limits.hpp"

namespace muster::proto {

namespace {

using wire::Presence;

constexpr size_t kMaxAddrBytes = 256;      // host:port, host names
constexpr size_t kMaxMessageBytes = 4096;  // sentences for humans
constexpr size_t kMaxJobsPerBeat = 65536;

template <class IO>
void endpoint(IO& io, const char* name, std::string& v, Presence pr = wire::kRequired) {
  io.str(name, v, kMaxAddrBytes, pr);
  io.check([&] {
    for (unsigned char c : v)
      if (c <= ' ' || c >= 127)
        throw Error(ErrorCode::kInvalidArgument, std::string(name) + " must be printable");
  });
}

template <class IO>
void node(IO& io, std::string& id) {
  io.str("node_id", id, kMaxAddrBytes * 2);
  io.check([&] {
    if (id.empty()) throw Error(ErrorCode::kInvalidArgument, "node_id must not be empty");
  });
}

// Where and when a node joins a job's world (Rendezvous, NodeJoin).
template <class IO, class M>
void joining(IO& io, M& m) {
  io.num("node_rank", m.node_rank, -1, kMaxNodes - 1);
  io.num("min_nodes", m.min_nodes, 1, kMaxNodes);
  io.num("max_nodes", m.max_nodes, 1, kMaxNodes);
  io.check([&] {
    if (m.min_nodes > m.max_nodes)
      throw Error(ErrorCode::kInvalidArgument, "min_nodes " + std::to_string(m.min_nodes) +
                                                   " is larger than max_nodes " +
                                                   std::to_string(m.max_nodes));
    if (m.node_rank >= static_cast<int64_t>(m.max_nodes))
      throw Error(ErrorCode::kInvalidArgument, "node_rank " + std::to_string(m.node_rank) +
                                                   " is not below max_nodes " +
                                                   std::to_string(m.max_nodes));
  });
  io.ms("last_call_ms", m.last_call_ms);
  io.ms("timeout_ms", m.timeout_ms);
  endpoint(io, "master_addr", m.master_addr);
  io.num("master_port", m.master_port, 0, 65535);
}

// Names a broadcast: (job, generation, seq, root).
template <class IO, class M>
void broadcast(IO& io, M& m) {
  io.job(m.job);
  io.generation(m.generation);
  io.num("seq", m.seq, 1, UINT64_MAX);
  io.num("root", m.root, 0, kMaxWorldSize - 1);
}

// A broadcast's size and chunk size, as the root announced them.
template <class IO, class M>
void chunking(IO& io, M& m) {
  io.num("size", m.size, 1, kMaxBcastSize);
  io.num("chunk", m.chunk, kMinBcastChunk, kMaxBcastChunk);
}
// The number of chunks (size and chunk are checked before this is used).
uint64_t chunks(uint64_t size, uint64_t chunk) {
  return chunk ? (size + chunk - 1) / chunk : 0;
}

// A rank's pool (PoolRef), absent unless it names one.
template <class IO>
void pool_ref(IO& io, PoolRef& r) {
  io.num("pool_fd", r.fd, 0, INT32_MAX, wire::kUnlessDefault);
  io.num("pool_dev", r.dev, 0, UINT64_MAX, wire::kUnlessDefault);
  io.num("pool_ino", r.ino, 0, UINT64_MAX, wire::kUnlessDefault);
  io.num("pool_offset", r.offset, 0, kMaxBcastSize * 2, wire::kUnlessDefault);
}

}  // namespace

template <class IO>
void Rendezvous::fields(IO& io) {
  io.job(job);
  endpoint(io, "coordinator", coordinator);
  io.check([&] {
    if (coordinator.empty())
      throw Error(ErrorCode::kInvalidArgument, "rendezvous needs a coordinator host:port");
  });
  joining(io, *this);
  endpoint(io, "via", via, wire::kUnlessDefault);
}

template <class IO>
void NodeJoin::fields(IO& io) {
  io.job(job);
  node(io, node_id);
  io.num("nproc", nproc, 1, limits::kMaxLocalWorldSize);
  joining(io, *this);
  endpoint(io, "peer_endpoint", peer_endpoint, wire::kUnlessDefault);
  io.num("owner_uid", owner_uid, -1, 0xffffffffLL, wire::kAddedLater);
  io.str("node_name", node_name, kMaxNodeNameBytes, wire::kUnlessDefault);
  io.str("run", run, kMaxNodeNameBytes, wire::kUnlessDefault);
  io.check([&] {
    // It is printed in other nodes' progress lines and status tables.
    for (unsigned char ch : node_name)
      if (ch < 0x20 || ch == 0x7f)
        throw Error(ErrorCode::kInvalidArgument, "node_name has a control character");
  });
  io.boolean("relay", relay, wire::kUnlessDefault);
  io.boolean("chain", chain, wire::kUnlessDefault);
}

template <class IO>
void Framed::fields(IO& io) {
  io.bin("frame", frame, kMaxBatchedFrameBytes);
}

template <class IO>
void NodeJoins::fields(IO& io) {
  io.job(job);
  io.list("joins", joins, kMaxBatchedJoins);
}

template <class IO>
void Replies::fields(IO& io) {
  io.list("replies", replies, kMaxBatchedJoins);
}

template <class IO>
void World::fields(IO& io) {
  io.job(job);
  io.generation(generation);
  io.num("num_nodes", num_nodes, 1, kMaxNodes);
  io.num("node_rank", node_rank, 0, num_nodes - 1);
  io.num("world_size", world_size, 1, kMaxWorldSize);
  io.num("rank_offset", rank_offset, 0, world_size - 1);
  endpoint(io, "master_addr", master_addr);
  io.num("master_port", master_port, 0, 65535);
  endpoint(io, "parent", parent, wire::kAddedLater);
  io.num("subtree_ranks", subtree_ranks, 0, world_size, wire::kAddedLater);
  endpoint(io, "chain_prev", chain_prev, wire::kUnlessDefault);
  io.num("chain_next_nproc", chain_next_nproc, 0, limits::kMaxLocalWorldSize, wire::kUnlessDefault);
}

template <class IO>
void Forward::fields(IO& io) {
  io.job(job);
  io.generation(generation);
  io.boolean("relay", relay, wire::kUnlessDefault);
  io.tail("frame", frame, limits::kMaxFrameBytes);  // last: see pack_head
}

void Forward::pack_head(codec::Packer& p, size_t bytes) const {
  wire::pack_fields(p, *this, bytes);
}

template <class IO>
void BarrierUp::fields(IO& io) {
  io.job(job);
  io.generation(generation);
  io.str("name", name, limits::kMaxKeyBytes);
  io.num("count", count, 1, kMaxWorldSize);
  io.ms("timeout_ms", timeout_ms);
  io.boolean("relay", relay);
}

template <class IO>
void NodeHeard::fields(IO& io) {
  node(io, node_id);
  io.ms("age_ms", age_ms);
}

template <class IO>
void NodeWait::fields(IO& io) {
  node(io, node_id);
  wait.fields(io);
}

template <class IO>
void JobGeneration::fields(IO& io) {
  io.job(job);
  io.generation(generation);
  io.list("waits", waits, kMaxWaits, wire::kUnlessDefault);
  io.list("below", below, kMaxNodes, wire::kUnlessDefault);
  io.list("below_waits", below_waits, kMaxNodes, wire::kUnlessDefault);
  io.strs("left", left, kMaxNodes, kMaxAddrBytes * 2, wire::kUnlessDefault);
}

template <class IO>
void JobWaits::fields(IO& io) {
  io.job(job);
  io.generation(generation);
  node(io, node_id);
}

template <class IO>
void JobWaitsReply::fields(IO& io) {
  io.list("waits", waits, kMaxWaits);
}

template <class IO>
void Heartbeat::fields(IO& io) {
  node(io, node_id);
  io.list("jobs", jobs, kMaxJobsPerBeat);
  io.boolean("relay", relay, wire::kUnlessDefault);
}

template <class IO>
void JobEvent::fields(IO& io) {
  io.job(job);
  io.generation(generation);
  io.str("state", state, 32);
  io.str("message", message, kMaxMessageBytes);
  forming.fields(io);
  io.num("heard_ms", heard_ms, 0, limits::kMaxTimeoutMs, wire::kUnlessDefault);
  io.boolean("not_joined", not_joined, wire::kUnlessDefault);
}

template <class IO>
void HeartbeatAck::fields(IO& io) {
  io.list("events", events, kMaxJobsPerBeat);
}

template <class IO>
void RankExited::fields(IO& io) {
  io.job(job);
  io.generation(generation);
  io.num("rank", rank, 0, kMaxWorldSize - 1);
  io.str("why", why, kMaxMessageBytes);
  io.ints("also", also, kMaxWorldSize, 0, kMaxWorldSize - 1, wire::kUnlessDefault);
  io.boolean("relay", relay, wire::kUnlessDefault);
}

template <class IO>
void NodeLeave::fields(IO& io) {
  io.job(job);
  io.generation(generation);
  node(io, node_id);
  io.strs("also", also, kMaxNodes, kMaxAddrBytes * 2, wire::kUnlessDefault);
  io.boolean("relay", relay, wire::kUnlessDefault);
}

template <class IO>
void ClusterState::fields(IO& io) {
  io.job(job);
}

template <class IO>
void ClusterStateReply::fields(IO& io) {
  event.fields(io);
}

// data comes last, so that the root can write a chunk into its frame once
// (pack_head).
template <class Data>
template <class IO>
void BcastPushOf<Data>::fields(IO& io) {
  broadcast(io, *this);
  chunking(io, *this);
  io.num("index", index, 0, chunks(size, chunk) - 1);
  io.num("sum", sum, 0, UINT64_MAX);
  io.ms("timeout_ms", timeout_ms);
  pool_ref(io, pool);
  io.tail("data", data, kMaxBcastChunk);
  io.check([&] {
    if (pool.set() && !data.empty())
      throw Error(ErrorCode::kInvalidArgument,
                  "bcast_push names a pool and carries bytes: one or the other");
    if (!pool.set() && data.size() != std::min(chunk, size - index * chunk))
      throw Error(ErrorCode::kInvalidArgument,
                  "bcast_push chunk " + std::to_string(index) + " has " +
                      std::to_string(data.size()) + " bytes, not " +
                      std::to_string(std::min(chunk, size - index * chunk)));
  });
}

template <class Data>
void BcastPushOf<Data>::pack_head(codec::Packer& p, size_t bytes) const {
  wire::pack_fields(p, *this, bytes);
}

MUSTER_CODEC_OF(template <class Data>, BcastPushOf<Data>)
template struct BcastPushOf<std::string>;
template struct BcastPushOf<std::string_view>;  // BcastPushView

template <class IO>
void BcastPull::fields(IO& io) {
  broadcast(io, *this);
  io.num("node_rank", node_rank, 0, kMaxNodes - 1);
  chunking(io, *this);
  io.num("index", index, 0, chunks(size, chunk) - 1);
  io.num("have", have, 0, index);
  io.ms("timeout_ms", timeout_ms);
  pool_ref(io, pool);
  io.boolean("shared", shared, wire::kUnlessDefault);
}

template <class Data>
template <class IO>
void BcastChunkOf<Data>::fields(IO& io) {
  io.num("index", index, 0, kMaxBcastSize);
  io.num("sum", sum, 0, UINT64_MAX);
  io.boolean("written", written, wire::kUnlessDefault);
  io.str("job", job, limits::kMaxJobIdBytes, wire::kUnlessDefault);
  io.num("generation", generation, 0, UINT64_MAX, wire::kUnlessDefault);
  io.num("seq", seq, 0, UINT64_MAX, wire::kUnlessDefault);
  io.num("root", root, 0, kMaxWorldSize - 1, wire::kUnlessDefault);
  io.tail("data", data, kMaxBcastChunk);
  io.check([&] {
    if (written && !data.empty())
      throw Error(ErrorCode::kInvalidArgument, "bcast_chunk written to a pool carries bytes");
  });
}

template <class Data>
void BcastChunkOf<Data>::pack_head(codec::Packer& p, uint64_t index, uint64_t sum, size_t bytes) {
  wire::pack_fields(p, BcastChunkOf{index, sum, false, {}, 0, 0, 0, {}}, bytes);
}

template <class Data>
void BcastChunkOf<Data>::pack_shared_head(codec::Packer& p, const BcastChunkOf& name,
                                          size_t bytes) {
  wire::pack_fields(p, name, bytes);
}

MUSTER_CODEC_OF(template <class Data>, BcastChunkOf<Data>)
template struct BcastChunkOf<std::string>;
template struct BcastChunkOf<std::string_view>;  // BcastChunkView

template <class IO>
void BcastLeave::fields(IO& io) {
  broadcast(io, *this);
  io.num("node_rank", node_rank, 0, kMaxNodes - 1);
  chunking(io, *this);
  io.str("why", why, kMaxMessageBytes);
}

MUSTER_CODEC(Rendezvous)
MUSTER_CODEC(NodeJoin)
MUSTER_CODEC(World)
MUSTER_CODEC(Forward)
MUSTER_CODEC(BarrierUp)
MUSTER_CODEC(Heartbeat)
MUSTER_CODEC(HeartbeatAck)
MUSTER_CODEC(JobWaits)
MUSTER_CODEC(JobWaitsReply)
MUSTER_CODEC(RankExited)
MUSTER_CODEC(NodeLeave)
MUSTER_CODEC(NodeJoins)
MUSTER_CODEC(Replies)
MUSTER_CODEC(ClusterState)
MUSTER_CODEC(ClusterStateReply)
MUSTER_CODEC(BcastPull)
MUSTER_CODEC(BcastLeave)

}  // namespace muster::proto
