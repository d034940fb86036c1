// Multi-node bookkeeping, both sides of it. A node daemon keeps one Link per
// coordinator it talks to (requests in flight, heartbeats); the coordinator
// keeps, per job, the rendezvous round of the current generation and the
// job's global store. The handlers are State members (cluster/node.cpp,
// cluster/coordinator.cpp) so that the store code serves both.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "jobs/job.hpp"

namespace muster::daemon {

// Where a reply goes, and who asked: filled in by the server.
struct ReplyTo {
  std::string routing_id;
  bool delimiter = false;  // REQ-style peer: reply needs an empty frame
  uint64_t request_id = 0;
  bool from_peer = false;  // came in on the TCP peer socket, not the local one
  // The sender's credentials (SO_PEERCRED of its ipc connection, see
  // server.cpp). peer_uid = -1 means "an in-process caller" (the fuzz
  // target, unit tests driving State directly): nothing to check against,
  // so the ownership and pid checks are skipped and a job it creates has no
  // owner. The server never passes -1 for the local socket: it refuses a
  // request whose connection carries no credentials. Requests from peer
  // daemons are authenticated by CURVE instead and act for no local user.
  int64_t peer_uid = -1;
  int64_t peer_pid = 0;
  // The local connection the request came on (the server's token for it;
  // 0 = none known). A reply is sent only while that connection lives: once
  // it is gone, another uid may connect under the same routing id.
  uint64_t conn = 0;
};

// What the server sends: a reply (to), or, when link is set, a request to
// the coordinator daemon at that host:port over the node's own connection.
struct Outgoing {
  ReplyTo to;
  std::string frame;
  std::string link = {};
};

// A request this node sent to a coordinator, waiting for its answer.
struct LinkPending {
  enum class Kind {
    kForward,
    kRendezvous,
    kHeartbeat,
    kNotice,
    kRelayBarrier,  // this node's subtree entered a barrier
    kRelayGet,      // one key wait for every rank of the subtree waiting on it
  } kind = Kind::kForward;
  ReplyTo to;  // the local client to answer (forward, rendezvous)
  std::string job;
  std::string key = {};  // relay: the barrier's name, or the coalesced wait's key
  // heartbeat: the generation each job had when it was sent (an answer
  // about an older generation says nothing about the current one)
  std::map<std::string, uint64_t> asked = {};
};

// A node's relay for one job: barrier arrivals and key waits of its ranks
// and its children in the tree, sent upstream once for all of them.
struct RelayBarrier {
  uint32_t arrived = 0;
  std::set<uint32_t> local_ranks;
  std::vector<ReplyTo> waiters;
};
struct RelayState {
  std::map<std::string, RelayBarrier> barriers;      // by name
  std::map<std::string, std::vector<ReplyTo>> gets;  // by coalescing key
};

struct Link {
  Clock::time_point last_heard = Clock::now();
  Clock::time_point next_beat = Clock::now();
  bool lost = false;
  std::map<uint64_t, LinkPending> pending;  // by the request id we sent
};

// One node of a rendezvous round, as the coordinator sees it.
struct RoundNode {
  std::string node_id;
  ReplyTo to;  // where the World goes (pending while the round is open)
  uint32_t nproc = 1;
  int64_t want_rank = -1;
  std::string master_addr;
  int64_t master_port = 0;
  std::string peer_endpoint;  // where its daemon takes children ("" = nowhere)
  Clock::time_point last_seen;
  Clock::time_point join_deadline;  // open round only
  uint32_t node_rank = 0;           // closed round only
  bool left = false;                // its ranks all ended
};

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
  std::vector<RoundNode> waiting;              // arrived after it closed
  std::map<std::string, uint32_t> previous;    // node_id -> last node rank
  Job store;                                   // global kv + barriers
};

}  // namespace muster::daemon
