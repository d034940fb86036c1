#include "protocol/message_table.hpp"

#include <algorithm>
#include <array>

#include "protocol/names.hpp"

namespace muster::proto {

namespace {

using enum MsgType;
constexpr uint8_t L = kScopeLocal, P = kScopePeer, R = kScopeReply;
constexpr Sender kAny = Sender::kAnyone, kOwner = Sender::kJobOwner, kDaemon = Sender::kPeer,
                 kNoSender = Sender::kNone, kRoot = Sender::kAdmin;
constexpr bool Y = true, N = false;

// clang-format off
constexpr MessageTraits kTable[] = {
  // type              name                  scope  sender     area            creates fenced fwd  pids                       reply cache
  {kPing,              "ping",               L | P, kAny,      Area::kDaemon,  N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kJoin,              "join",               L,     kOwner,    Area::kJobs,    Y,      N,     N,   ClaimedPids::kPid,         Kept::kSaved},
  {kLeave,             "leave",              L,     kOwner,    Area::kJobs,    N,      N,     N,   ClaimedPids::kPid,         Kept::kSaved},
  {kReserve,           "reserve",            L,     kOwner,    Area::kJobs,    Y,      N,     N,   ClaimedPids::kLauncherPid, Kept::kSaved},
  {kAttach,            "attach",             L,     kOwner,    Area::kJobs,    N,      N,     N,   ClaimedPids::kPidList,     Kept::kSaved},
  {kStoreSet,          "store_set",          L,     kOwner,    Area::kStore,   N,      Y,     Y,   ClaimedPids::kNone,        Kept::kSaved},
  {kStoreGet,          "store_get",          L,     kOwner,    Area::kStore,   N,      Y,     Y,   ClaimedPids::kNone,        Kept::kNo},
  {kStoreAdd,          "store_add",          L,     kOwner,    Area::kStore,   N,      Y,     Y,   ClaimedPids::kNone,        Kept::kSaved},
  {kStoreCompareSet,   "store_compare_set",  L,     kOwner,    Area::kStore,   N,      Y,     Y,   ClaimedPids::kNone,        Kept::kSaved},
  {kStoreDelete,       "store_delete",       L,     kOwner,    Area::kStore,   N,      Y,     Y,   ClaimedPids::kNone,        Kept::kSaved},
  {kStoreWait,         "store_wait",         L,     kOwner,    Area::kStore,   N,      Y,     Y,   ClaimedPids::kNone,        Kept::kYes},
  {kBarrier,           "barrier",            L,     kOwner,    Area::kBarrier, N,      Y,     Y,   ClaimedPids::kNone,        Kept::kSaved},
  {kStatus,            "status",             L,     kAny,      Area::kDaemon,  N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kStoreNumKeys,     "store_num_keys",     L,     kOwner,    Area::kStore,   N,      Y,     Y,   ClaimedPids::kNone,        Kept::kNo},
  {kGpuDrain,          "gpu_drain",          L,     kRoot,     Area::kDaemon,  N,      N,     N,   ClaimedPids::kNone,        Kept::kSaved},
  {kShard,             "shard",              L,     kOwner,    Area::kShard,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kSamplerCommit,     "sampler_commit",     L,     kOwner,    Area::kShard,   N,      N,     Y,   ClaimedPids::kNone,        Kept::kSaved},
  {kSamplerResume,     "sampler_resume",     L,     kOwner,    Area::kShard,   N,      N,     Y,   ClaimedPids::kNone,        Kept::kNo},
  {kRendezvous,        "rendezvous",         L,     kOwner,    Area::kCluster, N,      N,     N,   ClaimedPids::kNone,        Kept::kYes},
  {kClusterState,      "cluster_state",      L,     kOwner,    Area::kCluster, N,      N,     N,   ClaimedPids::kNone,        Kept::kYes},
  {kNodeJoin,          "node_join",          P,     kDaemon,   Area::kPeer,    N,      N,     N,   ClaimedPids::kNone,        Kept::kSaved},
  {kForward,           "forward",            P,     kDaemon,   Area::kPeer,    N,      N,     N,   ClaimedPids::kNone,        Kept::kYes},
  {kHeartbeat,         "heartbeat",          P,     kDaemon,   Area::kPeer,    N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kRankExited,        "rank_exited",        P,     kDaemon,   Area::kPeer,    N,      N,     N,   ClaimedPids::kNone,        Kept::kYes},
  {kNodeLeave,         "node_leave",         P,     kDaemon,   Area::kPeer,    N,      N,     N,   ClaimedPids::kNone,        Kept::kYes},
  {kBarrierUp,         "barrier_up",         P,     kDaemon,   Area::kPeer,    N,      N,     N,   ClaimedPids::kNone,        Kept::kSaved},
  {kJobWaits,          "job_waits",          P,     kDaemon,   Area::kPeer,    N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kNodeJoins,         "node_joins",         P,     kDaemon,   Area::kPeer,    N,      N,     N,   ClaimedPids::kNone,        Kept::kSaved},
  {kBcastPush,         "bcast_push",         L,     kOwner,    Area::kBcast,   N,      N,     Y,   ClaimedPids::kNone,        Kept::kYes},
  {kBcastPull,         "bcast_pull",         L,     kOwner,    Area::kBcast,   N,      N,     Y,   ClaimedPids::kNone,        Kept::kYes},
  {kBcastLeave,        "bcast_leave",        L,     kOwner,    Area::kBcast,   N,      N,     Y,   ClaimedPids::kNone,        Kept::kYes},
  {kStoreAppend,      "store_append",       L,     kOwner,    Area::kStore,   N,      Y,     Y,   ClaimedPids::kNone,        Kept::kSaved},
  {kStoreMultiSet,    "store_multi_set",    L,     kOwner,    Area::kStore,   N,      Y,     Y,   ClaimedPids::kNone,        Kept::kSaved},
  {kStoreMultiGet,    "store_multi_get",    L,     kOwner,    Area::kStore,   N,      Y,     Y,   ClaimedPids::kNone,        Kept::kNo},
  {kStoreQueuePush,   "store_queue_push",   L,     kOwner,    Area::kStore,   N,      Y,     Y,   ClaimedPids::kNone,        Kept::kSaved},
  {kStoreQueuePop,    "store_queue_pop",    L,     kOwner,    Area::kStore,   N,      Y,     Y,   ClaimedPids::kNone,        Kept::kSaved},
  {kStoreQueueLen,    "store_queue_len",    L,     kOwner,    Area::kStore,   N,      Y,     Y,   ClaimedPids::kNone,        Kept::kNo},
  {kStoreListKeys,    "store_list_keys",    L,     kOwner,    Area::kStore,   N,      Y,     Y,   ClaimedPids::kNone,        Kept::kNo},
  {kOk,                "ok",                 R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kErrorReply,        "error",              R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kPong,              "pong",               R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kRankInfo,          "rank_info",          R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kReserved,          "reserved",           R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kValue,             "value",              R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kInt,               "int",                R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kBool,              "bool",               R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kStatusReply,       "status_reply",       R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kShardReply,        "shard_reply",        R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kSamplerPlace,      "sampler_place",      R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kClusterStateReply, "cluster_state_reply",R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kWorld,             "world",              R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kHeartbeatAck,      "heartbeat_ack",      R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kJobWaitsReply,     "job_waits_reply",    R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kReplies,           "replies",            R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kBcastChunk,        "bcast_chunk",        R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
  {kValues,            "values",             R,     kNoSender, Area::kReply,   N,      N,     N,   ClaimedPids::kNone,        Kept::kNo},
};
// clang-format on

constexpr bool sorted_and_consistent() {
  for (size_t i = 1; i < std::size(kTable); ++i)
    if (kTable[i - 1].type >= kTable[i].type) return false;
  for (const auto& t : kTable) {
    bool reply = t.scope == kScopeReply;
    if (reply != (t.sender == Sender::kNone) || reply != (t.area == Area::kReply)) return false;
    // Only a request that names a job can create one, be fenced or
    // forwarded, or claim pids.
    bool names_job = t.sender == Sender::kJobOwner;
    if (!names_job && (t.creates_job || t.fenced || t.forwardable || t.pids != ClaimedPids::kNone))
      return false;
    // The peer port speaks daemon to daemon only (and ping).
    if ((t.scope & kScopePeer) && t.sender != Sender::kPeer && t.type != kPing) return false;
    if (t.sender == Sender::kPeer && t.scope != kScopePeer) return false;
  }
  return true;
}
static_assert(sorted_and_consistent(), "message table: rows in type order, traits consistent");

}  // namespace

const MessageTraits* message_traits(uint16_t type) {
  auto it = std::lower_bound(
      std::begin(kTable), std::end(kTable), type,
      [](const MessageTraits& t, uint16_t v) { return static_cast<uint16_t>(t.type) < v; });
  if (it == std::end(kTable) || static_cast<uint16_t>(it->type) != type) return nullptr;
  return &*it;
}

std::span<const MessageTraits> message_table() {
  return kTable;
}

const char* type_name(uint16_t type) {
  const MessageTraits* t = message_traits(type);
  return t ? t->name : nullptr;
}

namespace {
// By value of each enum.
constexpr const char* kSenderNames[] = {"nobody (a reply)", "anyone", "job owner", "peer daemon",
                                        "root"};
constexpr const char* kAreaNames[] = {"daemon",  "jobs",  "store", "barrier", "shard",
                                      "cluster", "bcast", "peer",  "reply"};
constexpr const char* kKeptNames[] = {"no", "kept", "saved"};
constexpr const char* kClaimedPidsNames[] = {"-", "pid", "launcher_pid", "pids"};
static_assert(names_all(kSenderNames, Sender::kAdmin) && names_all(kAreaNames, Area::kReply) &&
              names_all(kKeptNames, Kept::kSaved) &&
              names_all(kClaimedPidsNames, ClaimedPids::kPidList));
}  // namespace

const char* sender_name(Sender s) {
  return name_in(kSenderNames, s, "?");
}
const char* area_name(Area a) {
  return name_in(kAreaNames, a, "?");
}
const char* kept_name(Kept k) {
  return name_in(kKeptNames, k, "?");
}
const char* claimed_pids_name(ClaimedPids p) {
  return name_in(kClaimedPidsNames, p, "?");
}

std::string scope_name(uint8_t scope) {
  if (scope == kScopeReply) return "reply";
  std::string s;
  if (scope & kScopeLocal) s = "local";
  if (scope & kScopePeer) s += s.empty() ? "peer" : "+peer";
  return s;
}

}  // namespace muster::proto
