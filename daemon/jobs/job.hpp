// A job as one daemon sees it: its local slots (one per local rank), the
// store, and the requests that wait on it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "jobs/key_values.hpp"

namespace muster::daemon {

using Clock = std::chrono::steady_clock;

enum class SlotState {
  kFree,      // nobody holds this local rank
  kReserved,  // booked by a launcher, worker not started yet
  kRunning,   // worker pid registered by the launcher, not joined yet
  kJoined,    // the process joined through libmuster
  kExited,    // the process ended (or left); its lease is gone
};

// The names status replies and the state file use: "free", "reserved",
// "running", "joined", "exited".
const char* slot_state_name(SlotState s);
std::optional<SlotState> slot_state_from_string(std::string_view s);
inline bool slot_live(SlotState s) {
  return s == SlotState::kReserved || s == SlotState::kRunning || s == SlotState::kJoined;
}

struct Slot {
  SlotState state = SlotState::kFree;
  int64_t pid = 0;         // the worker; for kReserved, the launcher
  int64_t joined_pid = 0;  // the process that joined (the worker or its child)
  int64_t device = -1;
};

struct BarrierState {
  uint64_t count = 0;  // ranks in, including whole subtrees (BarrierUp)
  std::set<uint32_t> arrived;
  std::vector<uint64_t> waiters;
  bool stuck_logged = false;  // its stuck line (--stuck-after) was written
};

// Where a node's part of a multi-node job stands, as its coordinator last
// said (cluster_state replies, heartbeat events and the state file spell it
// "forming", "running", "broken", "waiting").
enum class ClusterPhase {
  kForming,  // no World yet for this generation
  kRunning,  // the world is formed and healthy
  kBroken,   // a node failed: this generation cannot go on
  kWaiting,  // nodes wait to join: the next generation forms once this ends
};
const char* to_string(ClusterPhase p);
std::optional<ClusterPhase> cluster_phase_from_string(std::string_view s);

// A node's view of a multi-node job: where its coordinator is and what
// world the last rendezvous gave this node.
struct ClusterInfo {
  std::string coordinator;  // host:port
  bool formed = false;      // a World arrived
  uint32_t node_rank = 0;
  uint32_t num_nodes = 1;
  uint32_t rank_offset = 0;
  uint32_t world_size = 0;
  ClusterPhase phase = ClusterPhase::kForming;
  std::string message;
  // The relay tree: where barriers and key waits go ("" = the coordinator)
  // and how many ranks this node answers for (its own and its subtree's).
  std::string parent;
  uint32_t subtree_ranks = 0;
  // Broadcasts go node to node: where this node pulls chunks from (World::
  // chain_prev; "" = through the coordinator).
  std::string chain_prev;
  uint32_t chain_next_nproc = 0;  // World::chain_next_nproc
  // Heartbeats and the node's leave go to the parent too, unless it fell
  // silent or could not speak for the job: then to the coordinator, for
  // the rest of this generation.
  bool beat_direct = false;
  // Where this node's join went (a relay that batches joins), while its
  // World has not come; "" = straight to the coordinator (cluster/joins.cpp).
  std::string via;
  const std::string& upstream() const { return parent.empty() ? coordinator : parent; }
  const std::string& beat_to() const { return formed && !beat_direct ? upstream() : coordinator; }
};

// A number no other Job object of this process has: the persister tells a
// job that ended and came back under the same id (a new store) from the
// same job changed.
uint64_t next_job_incarnation();

struct Job {
  std::string id;
  uint64_t incarnation = next_job_incarnation();
  // The uid that created the job (reserve or first join); only it and root
  // may use the job. -1: created by an in-process caller, no owner.
  int64_t owner_uid = -1;
  uint64_t generation = 0;
  // The muster run that reserved the job (0: joined without one); it
  // outlives the job between generations (SamplerProgress).
  int64_t launcher_pid = 0;
  // What that muster run pinned its workers to (none, node, socket), as its
  // attach said; "" when not said. For status.
  std::string numa_binding{};
  uint32_t local_world_size = 0;
  bool wants_gpu = false;
  std::vector<Slot> slots;
  KeyValues kv;
  std::vector<uint64_t> key_waiters;  // ids into Store::waiters_
  std::map<std::string, BarrierState> barriers;
  std::optional<ClusterInfo> cluster;  // set for a node's part of a multi-node job
  // The coordinator's global store of a multi-node job: no slots; ranks
  // are global, world_size is the whole world's.
  bool global = false;
  uint32_t global_world_size = 0;
  std::set<uint32_t> exited_ranks;
  std::string broken;  // why no barrier of this generation can complete
  // A GPU the job holds failed (core/gpu_health.cpp): every wait of the job fails
  // with device_failed and this sentence, which names the GPU.
  std::string device_failure{};

  uint32_t world_size() const {
    if (cluster) return cluster->world_size;
    return global ? global_world_size : local_world_size;
  }
  // Whether `viewer` (a uid) may see the job in a status reply: root and
  // in-process callers (viewer <= 0) see every job.
  bool visible_to(int64_t viewer) const {
    return viewer <= 0 || owner_uid < 0 || owner_uid == viewer;
  }
  // Whether the store holds every one of `keys` (a wait's condition).
  bool has_all(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!kv.contains(k)) return false;
    return true;
  }
  bool live() const {
    for (const auto& s : slots)
      if (slot_live(s.state)) return true;
    return false;
  }
};

}  // namespace muster::daemon
