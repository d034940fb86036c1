// Broadcast across nodes, the coordinator's part (cluster/broadcast/relayed_broadcasts.hpp):
// the root's daemon pushes the chunks of a broadcast here, one local rank of
// every other node pulls them through its own daemon (both inside Forward,
// so generation fencing and lost nodes work as for the store). Per
// broadcast, a bounded window of chunks: a push is answered once its chunk
// fits the window, a chunk is dropped once every pulling node holds it, so
// chunks go out while later ones still arrive and a broadcast of any size
// holds at most about 2 windows here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cluster/cluster.hpp"
#include "muster/error.hpp"

namespace muster::daemon {

struct PoolFile;  // cluster/broadcast/pool_files.hpp

struct BcastRelay {
  static constexpr uint64_t kGone = UINT64_MAX;  // a node that needs no more chunks

  uint32_t root = 0;
  uint32_t root_node = 0;
  uint32_t pullers = 0;  // nodes that pull (all but the root's)
  uint64_t size = 0, chunk = 0, chunks = 0;
  uint64_t window = 0;  // in chunks
  // A chunk as one bcast_chunk frame, made once: the shared frame (request
  // id 0, named by its broadcast) that answers every node's shared pull
  // (BcastPull::shared), sent to each without a copy; a pull that is not
  // shared gets a frame of its own, a copy.
  struct Chunk {
    // Its first byte; null once every node was sent it. It owns the heap
    // copy, or the mapping of the root's pool (map_chunk) it points into.
    std::shared_ptr<char> frame;
    size_t size = 0;     // of frame
    size_t data_at = 0;  // where the chunk's bytes start in it
    uint64_t bytes = 0;  // of the chunk
    uint64_t sum = 0;
    std::vector<bool> served;  // by node rank
    uint32_t served_count = 0;
  };
  std::map<uint64_t, Chunk> held;  // chunks >= low that arrived
  uint64_t low = 0;                // every pulling node holds the chunks below
  std::vector<uint64_t> have;      // by node rank: chunks held from 0, or kGone
  struct Parked {
    ReplyTo to;
    uint64_t index = 0;
    Clock::time_point deadline;
    uint32_t node = 0;
    bool shared = false;  // a pull: BcastPull::shared
  };
  std::vector<Parked> pushes;  // answered when their chunk fits the window
  std::vector<Parked> pulls;   // answered when their chunk arrives
  uint64_t pushed = 0;         // chunks [0, pushed) arrived (pushes come in order)
  bool root_done = false;      // every chunk was pushed
  bool finished = false;       // every node left: only this tombstone is left
  ErrorCode failed = ErrorCode::kOk;
  std::string why;       // when failed
  uint64_t relayed = 0;  // bytes sent to pulling nodes
  uint64_t shared = 0;   // of them, as the shared frame (into ranks' pools)
};

// A pushed chunk as its shared bcast_chunk frame, its bytes copied once
// out of the push's frame, or from the root's pool (`from`): its own pages
// where it is mapped (map_chunk: no copy at all), else read. Made by
// the coordinator, or by the root's node when chunks go node to node
// (cluster/broadcast/chain_broadcasts.cpp).
BcastRelay::Chunk shared_chunk(const proto::BcastPushView& m, size_t nodes, const PoolFile* from);

// A broadcast's window, in chunks of `chunk` bytes: 32 MiB, at least 2.
inline uint64_t bcast_window(uint64_t chunk) {
  return std::max<uint64_t>(2, (uint64_t{32} << 20) / chunk);
}

// One job's broadcasts, of its current generation.
struct BcastRelays {
  uint64_t generation = 0;
  uint64_t max_seq = 0;
  std::map<uint64_t, BcastRelay> by_seq;
};

}  // namespace muster::daemon
