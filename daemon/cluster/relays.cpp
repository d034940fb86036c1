// The relay tree of a multi-node job. A node answers for its own ranks and
// its children's subtrees: a barrier goes upstream once every rank below
// has entered it (BarrierUp with the count), and all the ranks below that
// wait for the same key share one upstream wait. So the coordinator gets
// O(tree width) messages per barrier or key wait, not O(ranks); the answer
// fans back out along the same path (relays.hpp).
#include "cluster/relays.hpp"
#include "core/key_values.hpp"
#include "core/out_answers.hpp"
#include "log.hpp"

namespace muster::daemon {

using proto::MsgType;

namespace {

// Waits for the same keys are one upstream wait.
std::string coalescing_key(const proto::Envelope& env) {
  codec::MapReader r(env.payload, proto::type_name(env.type));
  std::string k = std::to_string(env.type);
  if (static_cast<MsgType>(env.type) == MsgType::kStoreGet) return k + '\0' + r.str("key", 1 << 20);
  for (const auto& key : r.str_list("keys", 1 << 16, 1 << 20)) k += '\0' + key;
  return k;
}

// The set-once key (core/key_values.hpp) that a coalescing key waits for
// alone with a get, or "".
std::string kept_key(const std::string& coalescing) {
  const std::string get = std::to_string(static_cast<uint16_t>(MsgType::kStoreGet)) + '\0';
  if (!coalescing.starts_with(get)) return "";
  std::string key = coalescing.substr(get.size());
  return set_once(key) ? key : "";
}

}  // namespace

const std::string* Relays::kept(const Job& job, const std::string& key) const {
  auto rit = relays_.find(job.id);
  if (rit == relays_.end() || rit->second.kept_generation != job.generation) return nullptr;
  auto it = rit->second.kept.find(key);
  return it == rit->second.kept.end() ? nullptr : &it->second;
}

void Relays::barrier(const ReplyTo& to, Job& job, const std::string& name, uint32_t count,
                     int64_t local_rank, int64_t timeout_ms, std::vector<Outgoing>& out) {
  ClusterInfo& c = *job.cluster;
  RelayBarrier& b = relays_[job.id].barriers[name];
  if (local_rank >= 0 && !b.local_ranks.insert(static_cast<uint32_t>(local_rank)).second)
    throw Error(ErrorCode::kConflict, "rank " + std::to_string(c.rank_offset + local_rank) +
                                          " is already waiting in barrier '" + name + "'");
  if (b.arrived + count > c.subtree_ranks) {
    if (local_rank >= 0) b.local_ranks.erase(static_cast<uint32_t>(local_rank));
    throw Error(ErrorCode::kConflict, "barrier '" + name + "' of job '" + job.id +
                                          "': " + std::to_string(b.arrived + count) +
                                          " arrivals for a subtree of " +
                                          std::to_string(c.subtree_ranks) + " rank(s)");
  }
  b.arrived += count;
  b.waiters.push_back(to);
  if (b.arrived < c.subtree_ranks) return;
  proto::BarrierUp up{job.id, job.generation, name, c.subtree_ranks, timeout_ms, !c.parent.empty()};
  links_.send_relayed(
      c.upstream(), {LinkPending::Kind::kRelayBarrier, {}, job.id, name},
      [&](uint64_t id) { return proto::encode(id, up); }, out);
}

void Relays::get(const ReplyTo& to, Job& job, const proto::Envelope& env,
                 std::vector<Outgoing>& out) {
  std::string key = coalescing_key(env);
  // A child's get of a set-once key this relay keeps (a rank's own is
  // answered before: route.cpp).
  if (const std::string* value = kept(job, kept_key(key)))
    return out.push_back({to, proto::encode(to.request_id, proto::Value{*value}), {}});
  auto& relay = relays_[job.id];
  auto& waiters = relay.gets[key];
  waiters.push_back(to);
  if (waiters.size() > 1) return;
  relay.gets_since[key] = {Clock::now(), false};  // an upstream wait for these keys is out already
  const ClusterInfo& c = *job.cluster;
  proto::Forward f{job.id, job.generation, proto::encode_object(0, env.type, env.payload),
                   !c.parent.empty()};
  links_.send_relayed(
      c.upstream(), {LinkPending::Kind::kRelayGet, {}, job.id, key},
      [&](uint64_t id) { return proto::encode(id, f); }, out);
}

// A child daemon's BarrierUp or Forward (relay set) for our part of a job.
void Relays::from_child(const ReplyTo& to, const proto::Envelope& env, std::vector<Outgoing>& out) {
  auto type = static_cast<MsgType>(env.type);
  std::string id;
  uint64_t generation = 0;
  std::optional<proto::BarrierUp> up;
  std::optional<proto::Forward> fwd;
  if (type == MsgType::kBarrierUp) {
    up = proto::BarrierUp::unpack(env.payload);
    id = up->job, generation = up->generation;
  } else {
    fwd = proto::Forward::unpack(env.payload);
    id = fwd->job, generation = fwd->generation;
  }
  // What a relay passes on at all, checked before it may be held.
  std::optional<proto::Envelope> inner;
  if (fwd) {
    inner = proto::decode_envelope(fwd->frame.data(), fwd->frame.size());
    auto t = static_cast<MsgType>(inner->type);
    if (t != MsgType::kStoreGet && t != MsgType::kStoreWait && t != MsgType::kBcastPull &&
        t != MsgType::kBcastLeave)
      throw Error(ErrorCode::kUnknownType,
                  std::string("a relay passes on key waits and serves the next node's broadcast "
                              "pulls only, not '") +
                      proto::type_name(inner->type) + "'");
    codec::MapReader r(inner->payload, proto::type_name(inner->type));
    if (proto::read_job_id(r) != id)
      throw Error(ErrorCode::kPermissionDenied,
                  "a request relayed for job '" + id + "' may not touch another job");
  }
  Job* found = jobs_.find(id);
  if (!found || !found->cluster)
    throw Error(ErrorCode::kUnknownJob, "this daemon relays no job '" + id + "'");
  Job& job = *found;
  if (!job.cluster->formed || generation > job.generation) {
    // Our World (of that generation) is on its way: the child heard first.
    RelayState& r = relays_[id];
    std::string frame = proto::encode_object(to.request_id, env.type, env.payload);
    if (r.early.size() >= kMaxEarly || r.early_bytes + frame.size() > kMaxEarlyBytes)
      throw Error(ErrorCode::kUnavailable,
                  "this daemon holds " + std::to_string(r.early.size()) + " requests (" +
                      std::to_string(r.early_bytes) + " bytes) of job '" + id +
                      "' already, waiting for its world; send it again later");
    r.early_bytes += frame.size();
    r.early.push_back({to, std::move(frame)});
    return;
  }
  if (job.generation != generation)
    throw Error(ErrorCode::kStaleGeneration,
                "request from generation " + std::to_string(generation) + " refused: job '" + id +
                    "' is at generation " + std::to_string(job.generation) + " here");
  if (job.cluster->phase == ClusterPhase::kBroken)
    throw Error(ErrorCode::kPeerExited, "job '" + id + "' cannot go on: " + job.cluster->message);
  if (up) return barrier(to, job, up->name, up->count, -1, up->timeout_ms, out);
  const auto t = static_cast<MsgType>(inner->type);
  if (t == MsgType::kBcastPull || t == MsgType::kBcastLeave)
    return chain_.from_down(to, job, *inner, out);
  get(to, job, *inner, out);
}

// The value of a set-once key that came from upstream: kept for this
// generation (a relay holds at most what the coordinator's store quota
// lets it hold).
void Relays::keep(RelayState& r, const LinkPending& p, const proto::Envelope& env) {
  std::string key = kept_key(p.key);
  const Job* job = jobs_.find(p.job);
  if (key.empty() || !job || static_cast<MsgType>(env.type) != MsgType::kValue) return;
  if (r.kept_generation != job->generation) {
    r.kept.clear();
    r.kept_generation = job->generation;
  }
  r.kept[key] = proto::Value::unpack(env.payload).value;
}

// The upstream answer to a relayed barrier or key wait: everyone below
// gets it, under their own request ids.
void Relays::answer(const LinkPending& p, const proto::Envelope& env, std::vector<Outgoing>& out) {
  auto rit = relays_.find(p.job);
  if (rit == relays_.end()) return;
  std::vector<ReplyTo> waiters;
  if (p.kind == LinkPending::Kind::kRelayBarrier) {
    auto b = rit->second.barriers.find(p.key);
    if (b == rit->second.barriers.end()) return;
    waiters = std::move(b->second.waiters);
    rit->second.barriers.erase(b);
  } else {
    auto g = rit->second.gets.find(p.key);
    if (g == rit->second.gets.end()) return;
    waiters = std::move(g->second);
    rit->second.gets.erase(g);
    rit->second.gets_since.erase(p.key);
  }
  for (const auto& w : waiters)
    out.push_back({w, proto::encode_object(w.request_id, env.type, env.payload), {}});
  if (p.kind == LinkPending::Kind::kRelayGet) try {
      keep(rit->second, p, env);
    } catch (const Error&) {
      // not a value after all: answered as it is, not kept
    }
}

void Relays::early(const std::string& job, std::vector<Outgoing>& out) {
  auto rit = relays_.find(job);
  if (rit == relays_.end() || rit->second.early.empty()) return;
  rit->second.early_bytes = 0;
  for (auto& e : std::exchange(rit->second.early, {})) {
    try {
      from_child(e.to, proto::decode_envelope(e.frame.data(), e.frame.size()), out);
    } catch (const Error& err) {
      send_error(out, e.to, err.code(), err.what());
    }
  }
}

void Relays::fail(const std::string& job, ErrorCode code, const std::string& why,
                  std::vector<Outgoing>& out) {
  chain_.fail(job, code, why, false, out);  // its chain's nodes hear of it as this one did
  auto rit = relays_.find(job);
  if (rit == relays_.end()) return;
  for (const auto& e : rit->second.early) send_error(out, e.to, code, why);
  for (auto& [name, b] : rit->second.barriers)
    for (const auto& w : b.waiters) send_error(out, w, code, why);
  for (auto& [key, ws] : rit->second.gets)
    for (const auto& w : ws) send_error(out, w, code, why);
  // What was heard from below stays: it goes up in the heartbeats (and
  // the leaves with this node's own) whatever became of the waits.
  RelayState& r = rit->second;
  r.early.clear();
  r.early_bytes = 0;
  r.barriers.clear();
  r.gets.clear();
  r.gets_since.clear();
  r.kept.clear();
  links_.forget_relayed(job);
}

}  // namespace muster::daemon
