// Multi-node bookkeeping, both sides of it. A node daemon keeps one Link per
// coordinator it talks to (requests in flight, heartbeats); the coordinator
// keeps, per job, the rendezvous round of the current generation and the
// job's global store.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/reply.hpp"
#include "jobs/job.hpp"
#include "muster/error.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/messages.hpp"

namespace muster::daemon {

struct PoolFile;  // cluster/broadcast/pool_files.hpp

// A request this node sent to a coordinator, waiting for its answer.
struct LinkPending {
  enum class Kind {
    kForward,
    kRendezvous,
    kHeartbeat,
    kNotice,
    kRelayBarrier,  // this node's subtree entered a barrier
    kRelayGet,      // one key wait for every rank of the subtree waiting on it
    kJobWaits,      // a local status asked for the job's waits across its nodes
    kRelayNotice,   // a leave or rank_exited sent to the parent (key: the coordinator)
    kRelayJoin,     // a child's join, inside a NodeJoins (its answer goes to the child)
    kRelayJoins,    // a NodeJoins (inner: its joins' request ids)
  } kind = Kind::kForward;
  ReplyTo to;  // the local client to answer (forward, rendezvous)
  std::string job;
  std::string key = {};  // relay: the barrier's name, or the coalesced wait's key
  // heartbeat: the generation each job had when it was sent (an answer
  // about an older generation says nothing about the current one)
  std::map<std::string, uint64_t> asked = {};
  // heartbeat: up to where (RelayState::left_base + count) it carried each
  // job's relayed leaves; they are passed on once it is answered.
  std::map<std::string, size_t> left_sent = {};
  std::vector<uint64_t> inner = {};
  // The request as sent, to send again when the link reconnects (a
  // restarted coordinator lost it); empty for heartbeats (a new one goes
  // soon) and broadcast chunks (MiBs: failed with `restarted` instead).
  std::string frame = {};
  bool bcast = false;  // a forwarded bcast_push, bcast_pull or bcast_leave
  // Handled in process by the coordinator in this daemon (State::loop_back):
  // never on a connection, so never sent again.
  bool here = false;
  Clock::time_point sent = Clock::now();
  // A bcast_pull that named its rank's pool: the chunk (into_index, of
  // into_bytes) goes into that file at into_at, not to the rank
  // (cluster/bcast_pools.cpp).
  std::shared_ptr<PoolFile> into = {};
  uint64_t into_at = 0, into_index = 0, into_bytes = 0;
};

// A node's relay for one job: barrier arrivals and key waits of its ranks
// and its children in the tree, sent upstream once for all of them.
struct RelayBarrier {
  uint32_t arrived = 0;
  std::set<uint32_t> local_ranks;
  std::vector<ReplyTo> waiters;
  Clock::time_point since = Clock::now();  // the first arrival
  bool stuck_logged = false;               // its stuck line (--stuck-after) was written
};
// A child's request that came before this node's own World (the
// coordinator sends the Worlds of a round at once; a child may hear first):
// held until the World comes, then handled as if it came then.
struct EarlyRequest {
  ReplyTo to;
  std::string frame;  // the request, encoded again
};
struct RelayState {
  std::vector<EarlyRequest> early;  // at most kMaxEarly, of kMaxEarlyBytes
  size_t early_bytes = 0;
  std::map<std::string, RelayBarrier> barriers;      // by name
  std::map<std::string, std::vector<ReplyTo>> gets;  // by coalescing key
  // When the first wait for each coalescing key began, and whether its
  // stuck line was written.
  std::map<std::string, std::pair<Clock::time_point, bool>> gets_since;
  // Values of set-once keys (core/key_values.hpp: the NCCL ids) that came
  // from upstream in generation kept_generation: a later get of one, by a
  // late rank or child, is answered here without going upstream again.
  std::map<std::string, std::string> kept;  // key -> the value reply's payload
  uint64_t kept_generation = 0;
  // The nodes below (children, and theirs as the children's heartbeats
  // said) heard from within the peer timeout, and those whose part of the
  // job ended since this node's last heartbeat (relay_beats.cpp): both go
  // up in its next one, so the coordinator hears O(width) heartbeats.
  struct Heard {
    Clock::time_point at;
    std::vector<proto::WaitStatus> waits;
  };
  std::map<std::string, Heard> below;  // by node id
  std::vector<std::string> left;
  size_t left_base = 0;           // how many left went before left[0] (passed on)
  uint64_t below_generation = 0;  // of what below, left and exited hold
  // Ranks of this node and below that ended, not passed on yet: they go
  // upstream as one RankExited once the first has waited kExitedBatch.
  std::vector<int64_t> exited;
  std::string exited_why;
  Clock::time_point exited_first;
};

// Children's joins a relay holds for one job (cluster/joins.cpp): they go
// to the coordinator as one NodeJoins once the first has waited kJoinBatch
// (or, while this node's own rendezvous has not begun, until kJoinHold).
struct HeldJoins {
  std::vector<std::pair<ReplyTo, proto::NodeJoin>> joins;
  Clock::time_point first;
};

// Leaves of children that came after this node's own part of a job ended
// (its ranks may end first): passed on in batches while it lingers.
struct LateLeaves {
  std::string coordinator;
  std::string parent;  // where they go ("": to the coordinator)
  uint64_t generation = 0;
  uint32_t num_nodes = 0, world_size = 0;  // of that generation: bounds
  std::vector<std::string> left;
  std::vector<int64_t> exited;  // ranks below that ended
  std::string exited_why;
  Clock::time_point first;  // of those in left and exited: a batch goes 200 ms after
  Clock::time_point until;  // takes no more after this
};

// The coordinator's answer to a local status's job_waits: the job-wide
// waits, or none (the coordinator could not say: the node's own are shown).
struct JobWaitsAnswer {
  ReplyTo to;
  std::string job;
  std::optional<std::vector<proto::WaitStatus>> waits;
};

struct Link {
  Clock::time_point last_heard = Clock::now();
  // The oldest heartbeat on this link not answered yet (none: nullopt):
  // a parent that lets one wait half the peer timeout is passed over.
  std::optional<Clock::time_point> beat_unanswered;
  Clock::time_point next_beat = Clock::now();
  bool lost = false;
  std::map<uint64_t, LinkPending> pending;  // by the request id we sent
};

// One node of a rendezvous round, as the coordinator sees it.
struct RoundNode {
  std::string node_id;
  std::string name;  // for people (NodeJoin's node_name, else node_id)
  ReplyTo to;        // where the World goes (pending while the round is open)
  uint32_t nproc = 1;
  int64_t want_rank = -1;
  std::string master_addr;
  int64_t master_port = 0;
  std::string peer_endpoint;  // where its daemon takes children ("" = nowhere)
  Clock::time_point last_seen;
  Clock::time_point join_deadline;  // open round only
  uint32_t node_rank = 0;           // closed round only
  bool left = false;                // its ranks all ended
  // Of an open round restored after a restart, and not joined again yet:
  // the round does not close before it has (its World would be lost).
  bool restored = false;
  std::string run;  // NodeJoin::run ("" = unknown)
  // Its join came in a relay's NodeJoins: its World goes back in one
  // Replies with the others of that relay (coordinator.cpp).
  bool batched = false;
  // What its last heartbeat said its own ranks wait in, and when.
  std::vector<proto::WaitStatus> waits{};
  Clock::time_point waits_at{};
  bool chain = false;  // NodeJoin::chain (not saved: a restored round's next World has none)
};

inline std::string node_name(const RoundNode& n) {
  return "node " + std::to_string(n.node_rank) + " (" + n.node_id + ")";
}

inline RoundNode* find_node(std::vector<RoundNode>& v, const std::string& id) {
  for (auto& n : v)
    if (n.node_id == id) return &n;
  return nullptr;
}

// find_node of a round's nodes through an index (a relay's heartbeat names
// thousands of them): an entry is checked before it is used; a node found
// only by the scan (the nodes changed) rebuilds the index. For a closed
// round (its nodes stay put); an open one grows with every join, and a
// rebuild per lookup there cost more than the scans: node_join keeps the
// index exact as it adds nodes instead (open_member below).
using NodeIndex = std::unordered_map<std::string, size_t>;
inline RoundNode* find_member(std::vector<RoundNode>& v, NodeIndex& index, const std::string& id) {
  if (auto it = index.find(id);
      it != index.end() && it->second < v.size() && v[it->second].node_id == id)
    return &v[it->second];
  RoundNode* n = find_node(v, id);
  if (n) {
    index.clear();
    for (size_t i = 0; i < v.size(); ++i) index.emplace(v[i].node_id, i);
  }
  return n;
}

// The waits of the nodes below a relay, by node id, from its heartbeat.
inline std::map<std::string, std::vector<proto::WaitStatus>> waits_by_node(
    const proto::JobGeneration& jg) {
  std::map<std::string, std::vector<proto::WaitStatus>> out;
  for (const auto& w : jg.below_waits) out[w.node_id].push_back(w.wait);
  return out;
}

// A request inside a Forward may touch only the job the Forward was checked
// for (State::forward_in): a node admitted to one job cannot reach another.
inline void check_forwarded(const std::string& job, const std::string& forwarding) {
  if (job != forwarding)
    throw Error(ErrorCode::kPermissionDenied,
                "a request forwarded for job '" + forwarding + "' may not touch job '" + job + "'");
}

// A fresh incarnation number for a CoordJob (coord_liveness.cpp).
uint64_t next_round_incarnation();

struct CoordJob {
  uint64_t generation = 0;
  bool closed = false;  // the world of `generation` is formed
  std::string broken;   // why the closed round cannot go on ("" = healthy)
  // The current round exists because nodes joined (torchrun's membership
  // change), not because a node failed: not a failure for the others.
  bool membership_change = false;
  uint32_t min_nodes = 1, max_nodes = 1;
  int64_t owner_uid = -1;  // of the job on its first node: every node's must match
  int64_t last_call_ms = 0;
  std::optional<Clock::time_point> last_call;  // open round: close then
  std::vector<RoundNode> nodes;                // this round's
  NodeIndex index;                             // of nodes (find_member), not saved
  std::vector<RoundNode> waiting;              // arrived after it closed
  std::map<std::string, uint32_t> previous;    // node_id -> last node rank
  Job store;                                   // global kv + barriers
  // Which CoordJob object this is (the state file tells a round that was
  // replaced by another of the same job id between two saves).
  uint64_t incarnation = next_round_incarnation();
  // The highest broadcast sequence number started in the job (saved), and
  // the one it had when this daemon restored the round: the chunks of a
  // broadcast up to that one died with the daemon before, so its ranks are
  // told to start it again (relayed_broadcasts.cpp).
  uint64_t bcast_seq = 0;
  uint64_t restored_bcast_seq = 0;
  uint64_t restarted_counted = 0;  // muster/bcast/restarted counts it (not saved)
  // Restored after a restart and not heard from by any node since: the
  // job may be long gone (its nodes' daemons too). Dropped once it stays
  // so for the peer timeout; meanwhile it keeps no embedded daemon alive.
  std::optional<Clock::time_point> restored_quiet;
};

// A node of an open round, for node_join, through the index it keeps
// exact: every node it adds goes in (open_add), and a lookup rebuilds the
// index when its size says the nodes changed behind it (dropped for
// silence, a new round). A miss is then an answer, so a join costs O(1),
// not a scan of the thousands that joined before (O(n^2) a round).
inline RoundNode* open_member(CoordJob& cj, const std::string& id) {
  auto rebuild = [&] {
    cj.index.clear();
    for (size_t i = 0; i < cj.nodes.size(); ++i) cj.index.emplace(cj.nodes[i].node_id, i);
  };
  if (cj.index.size() != cj.nodes.size()) rebuild();
  auto it = cj.index.find(id);
  if (it == cj.index.end())
    return cj.index.size() == cj.nodes.size() ? nullptr : find_node(cj.nodes, id);
  if (it->second < cj.nodes.size() && cj.nodes[it->second].node_id == id)
    return &cj.nodes[it->second];
  rebuild();
  return find_node(cj.nodes, id);
}
inline void open_add(CoordJob& cj, RoundNode n) {
  if (cj.index.size() == cj.nodes.size()) cj.index.emplace(n.node_id, cj.nodes.size());
  cj.nodes.push_back(std::move(n));
}

// A node of the round, through the index (a forming round's thousands of
// nodes each beat every quarter of the peer timeout).
inline RoundNode* member(CoordJob& cj, const std::string& id) {
  return cj.closed ? find_member(cj.nodes, cj.index, id) : open_member(cj, id);
}

}  // namespace muster::daemon
