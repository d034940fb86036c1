// Every message type, declared once: its name, who may send it, on which
// socket, and what the daemon checks or does with it before any handler runs
// (doc/protocol.md, "Who may do what", prints the same table; a test holds the
// two together). A type without a row is refused. Adding a message means
// adding its row here, and nowhere else is a list of types kept.
#pragma once

#include <cstdint>
#include <span>

#include "protocol/messages.hpp"

namespace muster::proto {

// Who may send a request.
enum class Sender : uint8_t {
  kNone,      // a reply: never accepted as a request
  kAnyone,    // whoever reaches the socket (the socket's mode limits who that is)
  kJobOwner,  // the uid that owns the job the request names; root acts for any owner
  kPeer,      // an authenticated peer daemon (CURVE), on the peer port only
  kAdmin,     // root or the uid the daemon runs as (draining a GPU)
};

// Where a message may arrive: bits.
enum Scope : uint8_t {
  kScopeLocal = 1,  // the local ipc:// socket
  kScopePeer = 2,   // the TCP peer port
  kScopeReply = 4,  // only as an answer to something sent
};

// The part of the daemon that serves a request; requests forwarded between
// daemons are dispatched by it.
enum class Area : uint8_t {
  kDaemon,   // ping, status
  kJobs,     // join, leave, reserve, attach
  kStore,    // store_*
  kBarrier,  // barrier
  kShard,    // shard
  kCluster,  // a job that spans nodes (rendezvous, cluster_state)
  kBcast,    // broadcast across nodes
  kPeer,     // daemon to daemon
  kReply,
};

// Pids a request claims, which must be processes of the sender's uid.
enum class ClaimedPids : uint8_t { kNone, kPid, kLauncherPid, kPidList };

// What the reply cache keeps of a request's reply.
enum class Kept : uint8_t {
  kNo,     // reads: answering again is harmless and replies can be large
  kYes,    // kept, so a resent copy gets the same answer
  kSaved,  // kept and saved with the state: the request changed it
};

struct MessageTraits {
  MsgType type;
  const char* name;
  uint8_t scope;  // Scope bits
  Sender sender;
  Area area;
  bool creates_job;  // may create the job it names (the owner is its sender)
  bool fenced;       // a generation it carries must be the job's
  bool forwardable;  // a node sends it on to the job's coordinator
  ClaimedPids pids;
  Kept kept;
};

// The row of a type, or nullptr for a type without one.
const MessageTraits* message_traits(uint16_t type);
// All rows, in type order.
std::span<const MessageTraits> message_table();

const char* sender_name(Sender s);
const char* area_name(Area a);
const char* kept_name(Kept k);
const char* claimed_pids_name(ClaimedPids p);
// "local", "peer", "local+peer", "reply".
std::string scope_name(uint8_t scope);

}  // namespace muster::proto
