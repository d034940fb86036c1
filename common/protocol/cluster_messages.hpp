// Messages of multi-node jobs (doc/protocol.md, "Many nodes"): what muster run
// asks its daemon (Rendezvous, ClusterState) and what daemons say to the
// job's coordinator over TCP (NodeJoin, Forward, Heartbeat, RankExited,
// NodeLeave). Same envelope and rules as every other message.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/messages.hpp"

namespace muster::proto {

inline constexpr uint32_t kMaxNodes = 65536;
inline constexpr uint32_t kMaxWorldSize = 1u << 24;
inline constexpr size_t kMaxNodeNameBytes = 256;

// Checked job id (printable, bounded), shared with messages.cpp.
std::string read_job_id(const codec::MapReader& r);

// muster run -> its daemon, after Reserve: join the job's world through the
// coordinator daemon at `coordinator` (host:port). Answered with World once
// the world of a generation forms (torchrun's c10d rendezvous).
struct Rendezvous {
  std::string job;
  std::string coordinator;  // host:port of the coordinating daemon's peer socket
  int64_t node_rank = -1;   // fixed order when >= 0
  uint32_t min_nodes = 1;
  uint32_t max_nodes = 1;
  int64_t last_call_ms = 0;  // after min_nodes joined, wait this long for more
  int64_t timeout_ms = 0;    // give up when no world formed in time
  std::string master_addr;   // this node's address, MASTER_ADDR when it is node 0
  int64_t master_port = 0;
  // host:port of a node daemon (a relay that listens for peers) that
  // takes this node's join to the coordinator in a batch with others;
  // empty = straight to the coordinator. Optional on the wire.
  std::string via{};
  MUSTER_MESSAGE(Rendezvous);
};

// A daemon -> the coordinator: the node side of Rendezvous.
struct NodeJoin {
  std::string job;
  std::string node_id;  // stable per daemon: host + runtime dir
  uint32_t nproc = 1;
  int64_t node_rank = -1;
  uint32_t min_nodes = 1;
  uint32_t max_nodes = 1;
  int64_t last_call_ms = 0;
  int64_t timeout_ms = 0;
  std::string master_addr;
  int64_t master_port = 0;
  // host:port where this node's daemon takes peers (children in the relay
  // tree); empty when it does not listen. Optional on the wire.
  std::string peer_endpoint;
  // The uid that owns the job on the joining node (-1 = none). The
  // coordinator admits to a job only nodes whose job the same uid owns.
  // Optional on the wire.
  int64_t owner_uid = -1;
  // What progress lines and status call this node (musterd --node-name,
  // the host name by default); empty = node_id. Optional on the wire.
  std::string node_name{};
  // Which muster run this node's part of the job belongs to (node id,
  // launcher pid and its start time); empty for a job without a launcher.
  // A coordinator carries a job's sampler progress over a gap between two
  // rounds only into a round that one of the same runs joins: a new launch
  // under the same job id starts afresh. Optional on the wire.
  std::string run{};
  // For the receiving daemon as a relay (it passes the join on in a
  // NodeJoins batch), not as the coordinator. Optional on the wire.
  bool relay = false;
  // This node's daemon serves broadcasts node to node (World::chain_prev):
  // a daemon from before chains does not say so, and the coordinator then
  // sends the job's broadcasts through itself. Optional on the wire.
  bool chain = false;
  MUSTER_MESSAGE(NodeJoin);
};

// A batch of joins or of their answers holds at most this many frames,
// each a NodeJoin, a World or an error reply (well under 4 KiB each).
inline constexpr size_t kMaxBatchedJoins = 1024;
inline constexpr size_t kMaxBatchedFrameBytes = 16384;

// One whole envelope (request or reply) inside a batch.
struct Framed {
  std::string frame;
  MUSTER_FIELDS;
  bool operator==(const Framed&) const = default;
};

// A relay -> the coordinator: its children's NodeJoins of one job, each a
// whole envelope under a request id of the relay's link. The coordinator
// takes each as if it came alone (an error reply for one refused) and
// answers the batch with Ok at once; the Worlds come when the round
// closes, those for one relay together in a Replies.
struct NodeJoins {
  std::string job;
  std::vector<Framed> joins;
  MUSTER_MESSAGE(NodeJoins);
};

// Replies to several requests of one peer's link (request id 0): each
// frame is the reply to its own request, as if it had come alone.
struct Replies {
  std::vector<Framed> replies;
  MUSTER_MESSAGE(Replies);
};

// The world of one generation as one node sees it.
struct World {
  std::string job;
  uint64_t generation = 0;
  uint32_t node_rank = 0;
  uint32_t num_nodes = 1;
  uint32_t rank_offset = 0;  // global rank of this node's local rank 0
  uint32_t world_size = 1;
  std::string master_addr;
  int64_t master_port = 0;
  // The relay tree (optional on the wire): where this node sends barriers
  // and key waits (empty = straight to the coordinator), and how many
  // ranks its subtree holds (its own and its children's, recursively).
  std::string parent;
  uint32_t subtree_ranks = 0;
  // Broadcasts across nodes go node to node along a chain (node rank k
  // pulls from node k - 1, mod num_nodes, starting at the root's node):
  // host:port of node k - 1's daemon. Empty when some node's daemon does
  // not listen for peers: then through the coordinator. Optional on the wire.
  std::string chain_prev = {};
  // How many ranks node k + 1 (mod num_nodes) runs: whether it holds the
  // root, so that this node is the chain's last and serves nobody.
  uint32_t chain_next_nproc = 0;
  MUSTER_MESSAGE(World);
};

// A daemon relays a client's store or barrier request of a multi-node job
// to the coordinator; `frame` is the request's whole envelope. Requests of
// another generation than the coordinator's are refused (fencing).
struct Forward {
  std::string job;
  uint64_t generation = 0;
  std::string frame;
  // For the receiving daemon as a relay (its part of the job), not as the
  // coordinator. Optional on the wire.
  bool relay = false;
  MUSTER_MESSAGE(Forward);
  // Everything pack() writes but the frame's `bytes` bytes, which must
  // follow: a daemon reads a chunk from a rank's pool into its frame once.
  void pack_head(codec::Packer& p, size_t bytes) const;
};

// `count` ranks of a subtree entered barrier `name`: one message per
// subtree instead of one per rank. Answered (Ok) when the whole world has
// entered it; relay as in Forward.
struct BarrierUp {
  std::string job;
  uint64_t generation = 0;
  std::string name;
  uint32_t count = 1;
  int64_t timeout_ms = 0;
  bool relay = false;
  MUSTER_MESSAGE(BarrierUp);
};

// A node below a relay in the tree, as the relay last heard it (a
// relayed Heartbeat carries its subtree's liveness up: doc/protocol.md, "Many
// nodes").
struct NodeHeard {
  std::string node_id;
  int64_t age_ms = 0;  // how long ago the relay heard it
  MUSTER_FIELDS;
  bool operator==(const NodeHeard&) const = default;
};
// One wait of a node below, as its heartbeat said (a list of its own, not
// inside NodeHeard: a frame nests at most limits::kMaxDepth deep).
struct NodeWait {
  std::string node_id;
  WaitStatus wait;
  MUSTER_FIELDS;
  bool operator==(const NodeWait&) const = default;
};

struct JobGeneration {
  std::string job;
  uint64_t generation = 0;
  // The barriers and key waits this node's own ranks wait in (counts and
  // missing ranks of this node only), for the coordinator's job-wide view
  // (JobWaits); optional on the wire.
  std::vector<WaitStatus> waits{};
  // From a relay: the nodes of its subtree it heard from within the peer
  // timeout, what their ranks wait in, and those whose part of the job
  // ended (their node_leave, batched). Optional on the wire.
  std::vector<NodeHeard> below{};
  std::vector<NodeWait> below_waits{};
  std::vector<std::string> left{};
  MUSTER_FIELDS;
  bool operator==(const JobGeneration&) const = default;
};

// Every quarter of the peer timeout, a daemon tells each coordinator it
// works with which jobs it runs; silence means the node is lost. A node
// with a parent in a formed world's relay tree sends it there instead
// (relay set), and the parent's own heartbeat carries it up.
struct Heartbeat {
  std::string node_id;
  std::vector<JobGeneration> jobs;
  bool relay = false;  // optional on the wire
  MUSTER_MESSAGE(Heartbeat);
};

// A node asks the coordinator for a job's open barriers and key waits
// across all its nodes (`muster status --job`): answered with
// JobWaitsReply, put together from what each node's last heartbeat said.
struct JobWaits {
  std::string job;
  uint64_t generation = 0;
  std::string node_id;  // the asking node: one of the job's

  MUSTER_MESSAGE(JobWaits);
};
struct JobWaitsReply {
  std::vector<WaitStatus> waits;
  MUSTER_MESSAGE(JobWaitsReply);
};

// What became of a job, for its daemons and for muster run.
struct JobEvent {
  std::string job;
  uint64_t generation = 0;  // the coordinator's current one
  std::string state;        // running | broken | waiting | forming | unknown
  std::string message;      // why, for humans
  // While state is forming and this node is in the round: who joined it.
  Forming forming{};
  // From a relay: how long ago the coordinator's word reached the relay's
  // end of the tree (0: the coordinator's own answer). "ask_coordinator"
  // as the state: the relay cannot speak for that job; the node asks the
  // coordinator itself. Optional on the wire.
  int64_t heard_ms = 0;
  // From the coordinator: the node is neither in the job's round nor
  // waiting for the next one (its join never came). Optional on the wire.
  bool not_joined = false;
  MUSTER_FIELDS;
  bool operator==(const JobEvent&) const = default;
};

struct HeartbeatAck {
  std::vector<JobEvent> events;  // one per job of the heartbeat
  MUSTER_MESSAGE(HeartbeatAck);
};

// A daemon tells the coordinator that a rank of a multi-node job ended, so
// barriers waiting for it fail now rather than at their timeout. Ranks
// that end within moments of each other go in one (`also`), and through
// the parent in the relay tree (relay set), which passes them on in its
// own batch.
struct RankExited {
  std::string job;
  uint64_t generation = 0;
  uint32_t rank = 0;
  std::string why;
  std::vector<int64_t> also{};  // more ranks that ended (optional on the wire)
  bool relay = false;           // optional on the wire
  MUSTER_MESSAGE(RankExited);
};

// A node's part of the job ended (all its ranks are gone). Sent to its
// parent in the relay tree (relay set), which passes it on in a batch:
// in its heartbeat's `left`, or in its own NodeLeave's `also`.
struct NodeLeave {
  std::string job;
  uint64_t generation = 0;
  std::string node_id;
  std::vector<std::string> also{};  // nodes below that left too (optional on the wire)
  bool relay = false;               // optional on the wire
  MUSTER_MESSAGE(NodeLeave);
};

// muster run polls how its job's world is doing (restart when broken, or
// when nodes wait to join the next generation).
struct ClusterState {
  std::string job;
  MUSTER_MESSAGE(ClusterState);
};

struct ClusterStateReply {
  JobEvent event;
  MUSTER_MESSAGE(ClusterStateReply);
};

// Broadcast across nodes (doc/protocol.md, "Broadcast across nodes"): the
// root rank pushes the chunks of its bytes to its daemon, which passes them
// (in Forward) to the job's coordinator; there one local rank of every other
// node pulls them through its own daemon. The coordinator keeps a bounded
// window of chunks per broadcast and answers a push only when its chunk fits
// the window; a chunk is dropped once every pulling node has it. A broadcast
// is named by (job, generation, seq, root); its chunks are `chunk` bytes
// each, the last one shorter, ceil(size / chunk) of them.
inline constexpr uint64_t kMinBcastChunk = 4096;
inline constexpr uint64_t kMaxBcastChunk = 16u << 20;
inline constexpr uint64_t kMaxBcastSize = uint64_t{1} << 44;

// A local rank's broadcast pool (its memfd, client/lib/broadcast/pool.hpp),
// which its own daemon reads a pushed chunk from, or writes a pulled chunk
// into, so that the bytes do not cross the local socket twice. The daemon
// opens /proc/<the sender's pid>/fd/<fd> and checks the file (see
// cluster/broadcast/pool_files.hpp); a daemon never sends one to another daemon.
struct PoolRef {
  std::optional<int32_t> fd;  // none: the bytes travel in the message
  uint64_t dev = 0, ino = 0;
  uint64_t offset = 0;  // where the broadcast's first byte is in the file
  bool set() const { return fd.has_value(); }
  bool operator==(const PoolRef&) const = default;
};

// The root's daemon relays one chunk; answered with ok once it fits the
// coordinator's window (or an error: a node was lost, the wait timed out).
// Data is std::string in the message, std::string_view in its view
// (BcastPushView), which reads the chunk in place: the coordinator copies
// it once, into the frame it answers pulls with.
template <class Data>
struct BcastPushOf {
  std::string job;
  uint64_t generation = 0;
  uint64_t seq = 0;   // the collective's number, the same on every rank (>= 1)
  uint32_t root = 0;  // global rank
  uint64_t size = 0;  // all the bytes (>= 1)
  uint64_t chunk = 0;
  uint64_t index = 0;
  uint64_t sum = 0;        // the chunk's checksum (the root's algorithm; checked by the pullers)
  Data data;               // min(chunk, size - index * chunk) bytes; none with pool
  int64_t timeout_ms = 0;  // how long the push may wait for room
  PoolRef pool = {};       // from its rank only: the bytes are in this pool
  MUSTER_MESSAGE_AS(BcastPushOf, MsgType::kBcastPush);
  // Everything pack() writes but data's `bytes` bytes, which must follow
  // (data itself is not used): the root writes a chunk into its frame once.
  void pack_head(codec::Packer& p, size_t bytes) const;
};
using BcastPush = BcastPushOf<std::string>;
using BcastPushView = BcastPushOf<std::string_view>;

// A node asks for chunk `index` (answered with bcast_chunk once it is
// there) and says that it holds chunks [0, have), which the coordinator may
// drop once every pulling node holds them. have <= index.
struct BcastPull {
  std::string job;
  uint64_t generation = 0;
  uint64_t seq = 0;
  uint32_t root = 0;
  uint32_t node_rank = 0;  // the pulling node (not the root's)
  uint64_t size = 0;       // as the root announced it
  uint64_t chunk = 0;
  uint64_t have = 0;
  uint64_t index = 0;
  int64_t timeout_ms = 0;
  PoolRef pool = {};  // from its rank only: write the chunk into this pool
  // From a node daemon only: answer with the chunk's one frame for every
  // node (a bcast_chunk under request id 0 that names the broadcast), sent
  // to each without a copy.
  bool shared = false;
  MUSTER_MESSAGE(BcastPull);
};

// Data as in BcastPushOf: BcastChunkView reads the chunk in place.
template <class Data>
struct BcastChunkOf {
  uint64_t index = 0;
  uint64_t sum = 0;
  // The local daemon wrote the chunk into the puller's pool (BcastPull's
  // pool): data is empty.
  bool written = false;
  // The shared frame (BcastPull::shared): the broadcast it is of.
  std::string job = {};
  uint64_t generation = 0, seq = 0;
  uint32_t root = 0;
  Data data;
  MUSTER_MESSAGE_AS(BcastChunkOf, MsgType::kBcastChunk);
  // Everything pack() writes but the data's `bytes` bytes, which must follow.
  static void pack_head(codec::Packer& p, uint64_t index, uint64_t sum, size_t bytes);
  // The same for the shared frame (BcastPull::shared): named by its
  // broadcast and chunk.
  static void pack_shared_head(codec::Packer& p, const BcastChunkOf& name, size_t bytes);
};
using BcastChunk = BcastChunkOf<std::string>;
using BcastChunkView = BcastChunkOf<std::string_view>;

// A node needs no more chunks of a broadcast: it has them all (why empty)
// or it gave up (why says why). From the root's node: every chunk was
// pushed (why empty), or the root stopped, which fails the broadcast for
// every node. Answered with ok.
struct BcastLeave {
  std::string job;
  uint64_t generation = 0;
  uint64_t seq = 0;
  uint32_t root = 0;
  uint32_t node_rank = 0;
  uint64_t size = 0;  // as the root announced it
  uint64_t chunk = 0;
  std::string why;
  MUSTER_MESSAGE(BcastLeave);
};

}  // namespace muster::proto
