// Broadcast across nodes along a chain (World::chain_prev; doc/protocol.md,
// "Broadcast across nodes"): when every node's daemon listens for peers,
// the coordinator carries no bytes. The root's node holds the chunks its
// root pushes; node k's daemon pulls each chunk from node k - 1's for its
// relay rank and holds it, the frame as it came, until node k + 1's has it
// (the chain ends before the root's node). Each node holds a bounded
// window for the next: the root's push waits for room as it does at a
// coordinator, a middle node's pull waits before it goes upstream. A
// failure anywhere goes both ways along the chain: errors to the pulls
// below, a leave with its reason above.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/cluster.hpp"
#include "muster/error.hpp"

namespace muster::daemon {

// Where a node stands in the chain of a broadcast from a root.
struct ChainRole {
  bool source = false;    // the root is one of its ranks
  bool has_down = false;  // the next node does not hold the root
};
ChainRole chain_role(const Job& job, uint32_t root);  // throws: a root outside the world

struct ChainCast {
  std::string job;
  uint64_t generation = 0, seq = 0;
  uint32_t root = 0;
  uint64_t size = 0, chunk = 0, chunks = 0;
  uint64_t window = 0;    // in chunks
  bool source = false;    // the root's node: its chunks come from the root's pushes
  bool has_down = false;  // a node pulls from this one (not the chain's last)
  // A chunk's shared bcast_chunk frame, as made (source) or as it came.
  struct Frame {
    std::shared_ptr<void> held;
    std::string_view body;
  };
  std::map<uint64_t, Frame> held;  // chunks >= down_have that this node has
  uint64_t down_have = 0;          // the next node holds chunks [0, down_have)
  bool down_left = false;          // the next node needs no more
  uint64_t pushed = 0;             // source: chunks [0, pushed) arrived
  bool local_done = false;         // this node's rank left it (root: pushed all)
  bool local_seen = false;         // this node's rank spoke of it (else: only the next node)
  // This node's relay gave up: the daemon pulls what the next node asks
  // for itself (self_pulls: in flight), and leaves upstream once it is done.
  bool gave_up = false;
  std::set<uint64_t> self_pulls;
  // The next node's pulls waiting for their chunk.
  struct Parked {
    ReplyTo to;
    uint64_t index = 0;
    Clock::time_point deadline;
  };
  std::vector<Parked> down_pulls;
  // This node's requests waiting for room in the window: the root's pushes
  // (answered ok then), the relay's pulls (sent upstream then, as framed).
  struct Waiting {
    ReplyTo to;
    uint64_t index = 0;
    Clock::time_point deadline;
    std::string frame;  // a pull, encoded again; empty for a push
  };
  std::vector<Waiting> waiting;
  ErrorCode failed = ErrorCode::kOk;
  std::string why;        // when failed
  bool finished = false;  // every part of it done: kept as a tombstone
  uint64_t passed = 0;    // bytes sent to the next node
};

inline std::string chain_name(const ChainCast& cc) {
  return "broadcast #" + std::to_string(cc.seq) + " of job '" + cc.job + "' from rank " +
         std::to_string(cc.root);
}
// A shared pull's name (BcastPull::shared): its answer comes under request
// id 0, named by broadcast and chunk, and goes to whoever asked for it.
inline std::string shared_pull_key(const std::string& job, uint64_t generation, uint64_t seq,
                                   uint32_t root, uint64_t index) {
  return job + '\0' + std::to_string(generation) + '/' + std::to_string(seq) + '/' +
         std::to_string(root) + '/' + std::to_string(index);
}
inline Clock::time_point chain_deadline(int64_t ms) {
  return Clock::now() + std::chrono::milliseconds(ms);
}

}  // namespace muster::daemon
