#include "persist/cluster_codec.hpp"

namespace muster::daemon::cluster_codec {

using codec::key;
using codec::MapReader;
using codec::put_str;

void pack_cluster(codec::Packer& p, const ClusterInfo& c) {
  p.pack_map(11);
  key(p, "coordinator"), put_str(p, c.coordinator);
  key(p, "formed"), p.pack(c.formed);
  key(p, "node_rank"), p.pack(c.node_rank);
  key(p, "num_nodes"), p.pack(c.num_nodes);
  key(p, "rank_offset"), p.pack(c.rank_offset);
  key(p, "world_size"), p.pack(c.world_size);
  key(p, "parent"), put_str(p, c.parent);
  key(p, "subtree_ranks"), p.pack(c.subtree_ranks);
  key(p, "chain_prev"), put_str(p, c.chain_prev);
  key(p, "chain_next_nproc"), p.pack(c.chain_next_nproc);
  key(p, "state"), put_str(p, to_string(c.phase));
}

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
  if (cr.has("chain_prev")) {  // from before chains: none
    c.chain_prev = cr.str("chain_prev", 256);
    c.chain_next_nproc = static_cast<uint32_t>(cr.u64("chain_next_nproc", 0, UINT32_MAX));
  }
  auto phase = cr.str("state", 32);
  c.phase = cluster_phase_from_string(phase).value_or(ClusterPhase::kBroken);
  if (c.coordinator.empty())
    throw Error(ErrorCode::kBadMessage, "job '" + job + "' has no coordinator");
  return c;
}

}  // namespace muster::daemon::cluster_codec
