#include "protocol/cluster_messages.hpp"

#include <algorithm>

#include "protocol/limits.hpp"

namespace muster::proto {

using codec::MapReader;
using codec::put_bin;
using codec::put_str;

namespace {

constexpr size_t kMaxAddrBytes = 256;      // host:port, host names
constexpr size_t kMaxMessageBytes = 4096;  // sentences for humans
constexpr size_t kMaxJobsPerBeat = 65536;

std::string endpoint_str(const MapReader& r, const char* name) {
  auto s = r.str(name, kMaxAddrBytes);
  for (unsigned char c : s)
    if (c <= ' ' || c >= 127)
      throw Error(ErrorCode::kInvalidArgument, std::string(name) + " must be printable");
  return s;
}
int64_t port(const MapReader& r) {
  return r.i64("master_port", 0, 65535);
}
int64_t ms(const MapReader& r, const char* name) {
  return r.i64(name, 0, limits::kMaxTimeoutMs);
}
uint32_t nodes(const MapReader& r, const char* name) {
  return static_cast<uint32_t>(r.u64(name, 1, kMaxNodes));
}
void check_nodes(uint32_t min_nodes, uint32_t max_nodes, int64_t node_rank) {
  if (min_nodes > max_nodes)
    throw Error(ErrorCode::kInvalidArgument, "min_nodes " + std::to_string(min_nodes) +
                                                 " is larger than max_nodes " +
                                                 std::to_string(max_nodes));
  if (node_rank >= static_cast<int64_t>(max_nodes))
    throw Error(ErrorCode::kInvalidArgument, "node_rank " + std::to_string(node_rank) +
                                                 " is not below max_nodes " +
                                                 std::to_string(max_nodes));
}
std::string read_node_id(const MapReader& r) {
  auto s = r.str("node_id", kMaxAddrBytes * 2);
  if (s.empty()) throw Error(ErrorCode::kInvalidArgument, "node_id must not be empty");
  return s;
}

}  // namespace

void Rendezvous::pack(codec::Packer& p) const {
  p.pack_map(9);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "coordinator"), put_str(p, coordinator);
  codec::key(p, "node_rank"), p.pack(node_rank);
  codec::key(p, "min_nodes"), p.pack(min_nodes);
  codec::key(p, "max_nodes"), p.pack(max_nodes);
  codec::key(p, "last_call_ms"), p.pack(last_call_ms);
  codec::key(p, "timeout_ms"), p.pack(timeout_ms);
  codec::key(p, "master_addr"), put_str(p, master_addr);
  codec::key(p, "master_port"), p.pack(master_port);
}
Rendezvous Rendezvous::unpack(const msgpack::object& o) {
  MapReader r(o, "rendezvous");
  Rendezvous m;
  m.job = read_job_id(r);
  m.coordinator = endpoint_str(r, "coordinator");
  if (m.coordinator.empty())
    throw Error(ErrorCode::kInvalidArgument, "rendezvous needs a coordinator host:port");
  m.node_rank = r.i64("node_rank", -1, kMaxNodes - 1);
  m.min_nodes = nodes(r, "min_nodes");
  m.max_nodes = nodes(r, "max_nodes");
  check_nodes(m.min_nodes, m.max_nodes, m.node_rank);
  m.last_call_ms = ms(r, "last_call_ms");
  m.timeout_ms = ms(r, "timeout_ms");
  m.master_addr = endpoint_str(r, "master_addr");
  m.master_port = port(r);
  return m;
}

void NodeJoin::pack(codec::Packer& p) const {
  p.pack_map(peer_endpoint.empty() ? 11 : 12);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "owner_uid"), p.pack(owner_uid);
  codec::key(p, "node_id"), put_str(p, node_id);
  codec::key(p, "nproc"), p.pack(nproc);
  codec::key(p, "node_rank"), p.pack(node_rank);
  codec::key(p, "min_nodes"), p.pack(min_nodes);
  codec::key(p, "max_nodes"), p.pack(max_nodes);
  codec::key(p, "last_call_ms"), p.pack(last_call_ms);
  codec::key(p, "timeout_ms"), p.pack(timeout_ms);
  codec::key(p, "master_addr"), put_str(p, master_addr);
  codec::key(p, "master_port"), p.pack(master_port);
  if (!peer_endpoint.empty()) codec::key(p, "peer_endpoint"), put_str(p, peer_endpoint);
}
NodeJoin NodeJoin::unpack(const msgpack::object& o) {
  MapReader r(o, "node_join");
  NodeJoin m;
  m.job = read_job_id(r);
  m.node_id = read_node_id(r);
  m.nproc = static_cast<uint32_t>(r.u64("nproc", 1, limits::kMaxLocalWorldSize));
  m.node_rank = r.i64("node_rank", -1, kMaxNodes - 1);
  m.min_nodes = nodes(r, "min_nodes");
  m.max_nodes = nodes(r, "max_nodes");
  check_nodes(m.min_nodes, m.max_nodes, m.node_rank);
  m.last_call_ms = ms(r, "last_call_ms");
  m.timeout_ms = ms(r, "timeout_ms");
  m.master_addr = endpoint_str(r, "master_addr");
  m.master_port = port(r);
  if (r.has("peer_endpoint")) m.peer_endpoint = endpoint_str(r, "peer_endpoint");
  if (r.has("owner_uid")) m.owner_uid = r.i64("owner_uid", -1, 0xffffffffLL);
  return m;
}

void World::pack(codec::Packer& p) const {
  p.pack_map(10);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "generation"), p.pack(generation);
  codec::key(p, "node_rank"), p.pack(node_rank);
  codec::key(p, "num_nodes"), p.pack(num_nodes);
  codec::key(p, "rank_offset"), p.pack(rank_offset);
  codec::key(p, "world_size"), p.pack(world_size);
  codec::key(p, "master_addr"), put_str(p, master_addr);
  codec::key(p, "master_port"), p.pack(master_port);
  codec::key(p, "parent"), put_str(p, parent);
  codec::key(p, "subtree_ranks"), p.pack(subtree_ranks);
}
World World::unpack(const msgpack::object& o) {
  MapReader r(o, "world");
  World m;
  m.job = read_job_id(r);
  m.generation = r.u64("generation", 0, UINT64_MAX);
  m.num_nodes = nodes(r, "num_nodes");
  m.node_rank = static_cast<uint32_t>(r.u64("node_rank", 0, m.num_nodes - 1));
  m.world_size = static_cast<uint32_t>(r.u64("world_size", 1, kMaxWorldSize));
  m.rank_offset = static_cast<uint32_t>(r.u64("rank_offset", 0, m.world_size - 1));
  m.master_addr = endpoint_str(r, "master_addr");
  m.master_port = port(r);
  if (r.has("parent")) m.parent = endpoint_str(r, "parent");
  if (r.has("subtree_ranks"))
    m.subtree_ranks = static_cast<uint32_t>(r.u64("subtree_ranks", 0, m.world_size));
  return m;
}

void Forward::pack(codec::Packer& p) const {
  p.pack_map(relay ? 4 : 3);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "generation"), p.pack(generation);
  codec::key(p, "frame"), put_bin(p, frame);
  if (relay) codec::key(p, "relay"), p.pack(true);
}
Forward Forward::unpack(const msgpack::object& o) {
  MapReader r(o, "forward");
  Forward m{read_job_id(r), r.u64("generation", 0, UINT64_MAX),
            r.bin("frame", limits::kMaxFrameBytes)};
  if (r.has("relay")) m.relay = r.boolean("relay");
  return m;
}

void BarrierUp::pack(codec::Packer& p) const {
  p.pack_map(6);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "generation"), p.pack(generation);
  codec::key(p, "name"), put_str(p, name);
  codec::key(p, "count"), p.pack(count);
  codec::key(p, "timeout_ms"), p.pack(timeout_ms);
  codec::key(p, "relay"), p.pack(relay);
}
BarrierUp BarrierUp::unpack(const msgpack::object& o) {
  MapReader r(o, "barrier_up");
  return {read_job_id(r),
          r.u64("generation", 0, UINT64_MAX),
          r.str("name", limits::kMaxKeyBytes),
          static_cast<uint32_t>(r.u64("count", 1, kMaxWorldSize)),
          ms(r, "timeout_ms"),
          r.boolean("relay")};
}

void Heartbeat::pack(codec::Packer& p) const {
  p.pack_map(2);
  codec::key(p, "node_id"), put_str(p, node_id);
  codec::key(p, "jobs"), p.pack_array(static_cast<uint32_t>(jobs.size()));
  for (const auto& j : jobs) {
    p.pack_map(2);
    codec::key(p, "job"), put_str(p, j.job);
    codec::key(p, "generation"), p.pack(j.generation);
  }
}
Heartbeat Heartbeat::unpack(const msgpack::object& o) {
  MapReader r(o, "heartbeat");
  Heartbeat m;
  m.node_id = read_node_id(r);
  const auto& jobs = r.array("jobs", kMaxJobsPerBeat);
  for (uint32_t i = 0; i < jobs.size; ++i) {
    MapReader j(jobs.ptr[i], "heartbeat.jobs[]");
    m.jobs.push_back({read_job_id(j), j.u64("generation", 0, UINT64_MAX)});
  }
  return m;
}

namespace {
void pack_event(codec::Packer& p, const JobEvent& e) {
  p.pack_map(4);
  codec::key(p, "job"), put_str(p, e.job);
  codec::key(p, "generation"), p.pack(e.generation);
  codec::key(p, "state"), put_str(p, e.state);
  codec::key(p, "message"), put_str(p, e.message);
}
JobEvent read_event(const MapReader& r) {
  return {read_job_id(r), r.u64("generation", 0, UINT64_MAX), r.str("state", 32),
          r.str("message", kMaxMessageBytes)};
}
}  // namespace

void HeartbeatAck::pack(codec::Packer& p) const {
  p.pack_map(1);
  codec::key(p, "events"), p.pack_array(static_cast<uint32_t>(events.size()));
  for (const auto& e : events) pack_event(p, e);
}
HeartbeatAck HeartbeatAck::unpack(const msgpack::object& o) {
  MapReader r(o, "heartbeat_ack");
  HeartbeatAck m;
  const auto& events = r.array("events", kMaxJobsPerBeat);
  for (uint32_t i = 0; i < events.size; ++i)
    m.events.push_back(read_event(MapReader(events.ptr[i], "heartbeat_ack.events[]")));
  return m;
}

void RankExited::pack(codec::Packer& p) const {
  p.pack_map(4);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "generation"), p.pack(generation);
  codec::key(p, "rank"), p.pack(rank);
  codec::key(p, "why"), put_str(p, why);
}
RankExited RankExited::unpack(const msgpack::object& o) {
  MapReader r(o, "rank_exited");
  return {read_job_id(r), r.u64("generation", 0, UINT64_MAX),
          static_cast<uint32_t>(r.u64("rank", 0, kMaxWorldSize - 1)),
          r.str("why", kMaxMessageBytes)};
}

void NodeLeave::pack(codec::Packer& p) const {
  p.pack_map(3);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "generation"), p.pack(generation);
  codec::key(p, "node_id"), put_str(p, node_id);
}
NodeLeave NodeLeave::unpack(const msgpack::object& o) {
  MapReader r(o, "node_leave");
  return {read_job_id(r), r.u64("generation", 0, UINT64_MAX), read_node_id(r)};
}

void ClusterState::pack(codec::Packer& p) const {
  p.pack_map(1);
  codec::key(p, "job"), put_str(p, job);
}
ClusterState ClusterState::unpack(const msgpack::object& o) {
  MapReader r(o, "cluster_state");
  return {read_job_id(r)};
}

void ClusterStateReply::pack(codec::Packer& p) const {
  pack_event(p, event);
}
ClusterStateReply ClusterStateReply::unpack(const msgpack::object& o) {
  return {read_event(MapReader(o, "cluster_state_reply"))};
}

namespace {

uint64_t read_seq(const MapReader& r) {
  return r.u64("seq", 1, UINT64_MAX);
}
uint32_t read_root(const MapReader& r) {
  return static_cast<uint32_t>(r.u64("root", 0, kMaxWorldSize - 1));
}
// size, chunk and an index among the chunks they make.
struct Chunking {
  uint64_t size, chunk, chunks;
};
Chunking read_chunking(const MapReader& r) {
  Chunking c;
  c.size = r.u64("size", 1, kMaxBcastSize);
  c.chunk = r.u64("chunk", kMinBcastChunk, kMaxBcastChunk);
  c.chunks = (c.size + c.chunk - 1) / c.chunk;
  return c;
}

}  // namespace

void BcastPush::pack(codec::Packer& p) const {
  pack_head(p, data.size());
  p.pack_bin_body(data.data(), static_cast<uint32_t>(data.size()));
}
void BcastPush::pack_head(codec::Packer& p, size_t bytes) const {
  p.pack_map(10);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "generation"), p.pack(generation);
  codec::key(p, "seq"), p.pack(seq);
  codec::key(p, "root"), p.pack(root);
  codec::key(p, "size"), p.pack(size);
  codec::key(p, "chunk"), p.pack(chunk);
  codec::key(p, "index"), p.pack(index);
  codec::key(p, "sum"), p.pack(sum);
  codec::key(p, "timeout_ms"), p.pack(timeout_ms);
  codec::key(p, "data"), p.pack_bin(static_cast<uint32_t>(bytes));
}
BcastPush BcastPush::unpack(const msgpack::object& o) {
  MapReader r(o, "bcast_push");
  BcastPush m;
  m.job = read_job_id(r);
  m.generation = r.u64("generation", 0, UINT64_MAX);
  m.seq = read_seq(r);
  m.root = read_root(r);
  auto c = read_chunking(r);
  m.size = c.size;
  m.chunk = c.chunk;
  m.index = r.u64("index", 0, c.chunks - 1);
  m.sum = r.u64("sum", 0, UINT64_MAX);
  m.data = r.bin("data", kMaxBcastChunk);
  if (m.data.size() != std::min(m.chunk, m.size - m.index * m.chunk))
    throw Error(ErrorCode::kInvalidArgument,
                "bcast_push chunk " + std::to_string(m.index) + " has " +
                    std::to_string(m.data.size()) + " bytes, not " +
                    std::to_string(std::min(m.chunk, m.size - m.index * m.chunk)));
  m.timeout_ms = ms(r, "timeout_ms");
  return m;
}

void BcastPull::pack(codec::Packer& p) const {
  p.pack_map(10);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "generation"), p.pack(generation);
  codec::key(p, "seq"), p.pack(seq);
  codec::key(p, "root"), p.pack(root);
  codec::key(p, "node_rank"), p.pack(node_rank);
  codec::key(p, "size"), p.pack(size);
  codec::key(p, "chunk"), p.pack(chunk);
  codec::key(p, "have"), p.pack(have);
  codec::key(p, "index"), p.pack(index);
  codec::key(p, "timeout_ms"), p.pack(timeout_ms);
}
BcastPull BcastPull::unpack(const msgpack::object& o) {
  MapReader r(o, "bcast_pull");
  BcastPull m;
  m.job = read_job_id(r);
  m.generation = r.u64("generation", 0, UINT64_MAX);
  m.seq = read_seq(r);
  m.root = read_root(r);
  m.node_rank = static_cast<uint32_t>(r.u64("node_rank", 0, kMaxNodes - 1));
  auto c = read_chunking(r);
  m.size = c.size;
  m.chunk = c.chunk;
  m.index = r.u64("index", 0, c.chunks - 1);
  m.have = r.u64("have", 0, m.index);
  m.timeout_ms = ms(r, "timeout_ms");
  return m;
}

void BcastChunk::pack(codec::Packer& p) const {
  pack_head(p, index, sum, data.size());
  p.pack_bin_body(data.data(), static_cast<uint32_t>(data.size()));
}
void BcastChunk::pack_head(codec::Packer& p, uint64_t index, uint64_t sum, size_t bytes) {
  p.pack_map(3);
  codec::key(p, "index"), p.pack(index);
  codec::key(p, "sum"), p.pack(sum);
  codec::key(p, "data"), p.pack_bin(static_cast<uint32_t>(bytes));
}
BcastChunk BcastChunk::unpack(const msgpack::object& o) {
  auto v = BcastChunkView::unpack(o);
  return {v.index, v.sum, std::string(v.data)};
}
BcastChunkView BcastChunkView::unpack(const msgpack::object& o) {
  MapReader r(o, "bcast_chunk");
  return {r.u64("index", 0, kMaxBcastSize), r.u64("sum", 0, UINT64_MAX),
          r.bin_view("data", kMaxBcastChunk)};
}

void BcastLeave::pack(codec::Packer& p) const {
  p.pack_map(8);
  codec::key(p, "job"), put_str(p, job);
  codec::key(p, "generation"), p.pack(generation);
  codec::key(p, "seq"), p.pack(seq);
  codec::key(p, "root"), p.pack(root);
  codec::key(p, "node_rank"), p.pack(node_rank);
  codec::key(p, "size"), p.pack(size);
  codec::key(p, "chunk"), p.pack(chunk);
  codec::key(p, "why"), put_str(p, why);
}
BcastLeave BcastLeave::unpack(const msgpack::object& o) {
  MapReader r(o, "bcast_leave");
  BcastLeave m;
  m.job = read_job_id(r);
  m.generation = r.u64("generation", 0, UINT64_MAX);
  m.seq = read_seq(r);
  m.root = read_root(r);
  m.node_rank = static_cast<uint32_t>(r.u64("node_rank", 0, kMaxNodes - 1));
  auto c = read_chunking(r);
  m.size = c.size;
  m.chunk = c.chunk;
  m.why = r.str("why", kMaxMessageBytes);
  return m;
}

}  // namespace muster::proto
