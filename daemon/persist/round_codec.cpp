#include "persist/round_codec.hpp"

#include <map>

#include "muster/error.hpp"
#include "persist/state_codec.hpp"
#include "protocol/limits.hpp"

namespace muster::daemon::round_codec {

using codec::key;
using codec::MapReader;
using codec::put_bin;
using codec::put_str;

namespace {

constexpr uint32_t kMaxNodes = 1u << 20;

// Where its World went is saved too (the node's stable routing id and its
// request's id). Only a closed round's nodes are saved (pack_round).
void pack_node(codec::Packer& p, const RoundNode& n) {
  p.pack_map(12);
  key(p, "id"), put_str(p, n.node_id);
  key(p, "name"), put_str(p, n.name);
  key(p, "to"), put_bin(p, n.to.routing_id);
  key(p, "request"), p.pack(n.to.request_id);
  key(p, "nproc"), p.pack(n.nproc);
  key(p, "want_rank"), p.pack(n.want_rank);
  key(p, "master_addr"), put_str(p, n.master_addr);
  key(p, "master_port"), p.pack(n.master_port);
  key(p, "peer_endpoint"), put_str(p, n.peer_endpoint);
  key(p, "node_rank"), p.pack(n.node_rank);
  key(p, "left"), p.pack(n.left);
  key(p, "run"), put_str(p, n.run);
}

RoundNode decode_node(const msgpack::object& o, const std::string& what) {
  MapReader r(o, what);
  RoundNode n;
  n.node_id = r.str("id", 256);
  if (n.node_id.empty()) throw Error(ErrorCode::kBadMessage, what + ": no node id");
  n.name = r.str("name", 256);
  n.to.routing_id = r.bin("to", 255);
  n.to.request_id = r.u64("request", 0, UINT64_MAX);
  n.to.from_peer = true;
  n.nproc = static_cast<uint32_t>(r.u64("nproc", 1, limits::kMaxLocalWorldSize));
  n.want_rank = r.i64("want_rank", -1, INT32_MAX);
  n.master_addr = r.str("master_addr", 256);
  n.master_port = r.i64("master_port", 0, 65535);
  n.peer_endpoint = r.str("peer_endpoint", 256);
  n.node_rank = static_cast<uint32_t>(r.u64("node_rank", 0, kMaxNodes));
  n.left = r.boolean("left");
  n.run = r.str("run", 512);
  return n;
}

void pack_nodes(codec::Packer& p, const std::vector<RoundNode>& v) {
  p.pack_array(static_cast<uint32_t>(v.size()));
  for (const auto& n : v) pack_node(p, n);
}

std::vector<RoundNode> decode_nodes(const MapReader& r, const char* name, const std::string& what) {
  std::vector<RoundNode> v;
  const auto& a = r.array(name, kMaxNodes);
  for (uint32_t i = 0; i < a.size; ++i)
    v.push_back(decode_node(a.ptr[i], what + " " + name + "[" + std::to_string(i) + "]"));
  return v;
}

}  // namespace

void pack_round(codec::Packer& p, const std::string& job, const CoordJob& cj, bool with_store,
                const std::function<void()>& spill) {
  const Job& st = cj.store;
  p.pack_map(with_store ? 17 : 16);
  key(p, "job"), put_str(p, job);
  key(p, "generation"), p.pack(cj.generation);
  key(p, "closed"), p.pack(cj.closed);
  key(p, "broken"), put_str(p, cj.broken);
  key(p, "membership_change"), p.pack(cj.membership_change);
  key(p, "min_nodes"), p.pack(cj.min_nodes);
  key(p, "max_nodes"), p.pack(cj.max_nodes);
  key(p, "owner"), p.pack(cj.owner_uid);
  key(p, "last_call_ms"), p.pack(cj.last_call_ms);
  // The nodes of an open round, and those waiting for the next one, have
  // had no answer: nothing about them is promised, and a node whose
  // coordinator restarts sends its join again (NodeLinks::resend). Not
  // saving them keeps a join's save O(1): a round of 12,500 nodes rewrote
  // its whole node list at every join, 23 GB of log (bench_swarm).
  static const std::vector<RoundNode> kNone;
  key(p, "nodes"), pack_nodes(p, cj.closed ? cj.nodes : kNone);
  key(p, "waiting"), pack_nodes(p, kNone);
  key(p, "previous"), p.pack_map(static_cast<uint32_t>(cj.previous.size()));
  for (const auto& [id, rank] : cj.previous) put_str(p, id), p.pack(rank);
  key(p, "world_size"), p.pack(st.global_world_size);
  key(p, "store_generation"), p.pack(st.generation);
  key(p, "exited"), p.pack_array(static_cast<uint32_t>(st.exited_ranks.size()));
  for (uint32_t r : st.exited_ranks) p.pack(r);
  key(p, "bcast_seq"), p.pack(cj.bcast_seq);
  if (!with_store) return;
  key(p, "kv"), state_codec::pack_store(p, st.kv, spill);
}

std::string round_record(const std::string& job, const CoordJob& cj) {
  codec::Buffer buf;
  codec::Packer p(buf);
  pack_round(p, job, cj, false);
  return std::string(buf.data(), buf.size());
}

std::string fingerprint(const CoordJob& cj) {
  if (!cj.closed) return {};
  uint64_t left = 0;
  for (const auto& n : cj.nodes) left += n.left;
  const Job& st = cj.store;
  std::string fp;
  for (uint64_t v : {cj.generation, uint64_t{cj.membership_change}, uint64_t{cj.min_nodes},
                     uint64_t{cj.max_nodes}, static_cast<uint64_t>(cj.owner_uid),
                     static_cast<uint64_t>(cj.last_call_ms), uint64_t{cj.nodes.size()}, left,
                     uint64_t{cj.previous.size()}, uint64_t{st.global_world_size}, st.generation,
                     uint64_t{st.exited_ranks.size()}, cj.bcast_seq})
    fp += std::to_string(v) + ',';
  return fp + cj.broken;
}

std::pair<std::string, CoordJob> decode_round(const msgpack::object& o, const std::string& what) {
  MapReader r(o, what);
  std::pair<std::string, CoordJob> out;
  out.first = r.str("job", limits::kMaxJobIdBytes);
  if (out.first.empty()) throw Error(ErrorCode::kBadMessage, what + ": no job id");
  CoordJob& cj = out.second;
  cj.generation = r.u64("generation", 0, UINT64_MAX);
  cj.closed = r.boolean("closed");
  cj.broken = r.str("broken", 4096);
  cj.membership_change = r.boolean("membership_change");
  cj.min_nodes = static_cast<uint32_t>(r.u64("min_nodes", 1, kMaxNodes));
  cj.max_nodes = static_cast<uint32_t>(r.u64("max_nodes", cj.min_nodes, kMaxNodes));
  cj.owner_uid = r.i64("owner", -1, INT32_MAX);
  cj.last_call_ms = r.i64("last_call_ms", 0, INT64_MAX);
  cj.nodes = decode_nodes(r, "nodes", what);
  cj.waiting = decode_nodes(r, "waiting", what);
  const auto& prev = r.map("previous");
  if (prev.type != msgpack::type::MAP || prev.via.map.size > kMaxNodes)
    throw Error(ErrorCode::kBadMessage, what + ": previous is not a map of node ranks");
  for (uint32_t i = 0; i < prev.via.map.size; ++i) {
    const auto& kv = prev.via.map.ptr[i];
    if (kv.key.type != msgpack::type::STR || kv.val.type != msgpack::type::POSITIVE_INTEGER ||
        kv.val.via.u64 > kMaxNodes)
      throw Error(ErrorCode::kBadMessage, what + ": a bad entry in previous");
    cj.previous[kv.key.as<std::string>()] = static_cast<uint32_t>(kv.val.via.u64);
  }
  Job& st = cj.store;
  st.id = out.first;
  st.global = true;
  st.global_world_size = static_cast<uint32_t>(r.u64("world_size", 0, UINT32_MAX));
  st.generation = r.u64("store_generation", 0, UINT64_MAX);
  st.broken = cj.broken;
  const auto& exited = r.array("exited", kMaxNodes * 64);
  for (uint32_t i = 0; i < exited.size; ++i) {
    if (exited.ptr[i].type != msgpack::type::POSITIVE_INTEGER ||
        exited.ptr[i].via.u64 >= st.global_world_size)
      throw Error(ErrorCode::kBadMessage, what + ": a bad exited rank");
    st.exited_ranks.insert(static_cast<uint32_t>(exited.ptr[i].via.u64));
  }
  cj.bcast_seq = r.u64("bcast_seq", 0, UINT64_MAX);
  if (r.has("kv")) state_codec::unpack_store(r, st.kv, what);
  st.kv.forget_changes();  // as it is on disk
  return out;
}

void apply(std::map<std::string, CoordJob>& rounds, uint8_t type, const msgpack::object& o) {
  namespace sc = state_codec;
  if (type == sc::kRound) {
    auto [job, cj] = decode_round(o, "log: round");
    // The header replaces the one before; the store's keys stay.
    if (auto it = rounds.find(job); it != rounds.end())
      cj.store.kv = std::move(it->second.store.kv);
    rounds[job] = std::move(cj);
    return;
  }
  MapReader r(o, "log: round record");
  auto id = r.str("job", limits::kMaxJobIdBytes);
  if (type == sc::kRoundGone) {
    rounds.erase(id);
    return;
  }
  auto it = rounds.find(id);
  if (it == rounds.end())
    throw Error(ErrorCode::kBadMessage, "a log record for round '" + id + "', which is not there");
  if (type == sc::kRoundKey)
    it->second.store.kv.set(r.bin("k", limits::kMaxStoreKeyBytes),
                            r.bin("v", limits::kMaxValueBytes));
  else
    it->second.store.kv.erase(r.bin("k", limits::kMaxStoreKeyBytes));
}

}  // namespace muster::daemon::round_codec
