// The coordinator side of a multi-node job (torchrun's c10d rendezvous
// host): rounds of NodeJoin that form the world of each generation, the
// job's one global store behind Forward, and node liveness by heartbeat.
#include <algorithm>
#include <numeric>

#include "cluster/coordinator.hpp"

#include "log.hpp"
#include "protocol/envelope.hpp"

namespace muster::daemon {

using proto::MsgType;

namespace {

// Where the coordinator runs a job of that name itself (node 0 usually
// does), its owner is the job's owner: another uid cannot take the name by
// joining first.
void check_local_owner(const std::map<std::string, Job>& jobs, const proto::NodeJoin& m) {
  auto local = jobs.find(m.job);
  if (local == jobs.end() || local->second.owner_uid < 0 || local->second.owner_uid == m.owner_uid)
    return;
  throw Error(ErrorCode::kPermissionDenied, "job '" + m.job + "' on this node belongs to uid " +
                                                std::to_string(local->second.owner_uid) +
                                                "; on node " + m.node_id + " it belongs to uid " +
                                                std::to_string(m.owner_uid));
}

RoundNode round_node(const ReplyTo& to, const proto::NodeJoin& m, Clock::time_point now,
                     bool batched) {
  return {.node_id = m.node_id,
          .name = m.node_name.empty() ? m.node_id : m.node_name,
          .to = to,
          .nproc = m.nproc,
          .want_rank = m.node_rank,
          .master_addr = m.master_addr,
          .master_port = m.master_port,
          .peer_endpoint = m.peer_endpoint,
          .last_seen = now,
          .join_deadline = now + std::chrono::milliseconds(m.timeout_ms ? m.timeout_ms : 900000),
          .node_rank = 0,
          .left = false,
          .run = m.run,
          .batched = batched,
          .chain = m.chain};
}

}  // namespace

bool Coordinator::has_node(const std::string& job, uint64_t generation,
                           const std::string& node_id) const {
  auto it = rounds_.find(job);
  if (it == rounds_.end() || !it->second.closed || it->second.generation != generation ||
      node_id.empty())
    return false;
  const auto& nodes = it->second.nodes;
  return std::any_of(nodes.begin(), nodes.end(),
                     [&](const RoundNode& n) { return n.node_id == node_id; });
}

Job* Coordinator::global_store(const std::string& job) {
  auto it = rounds_.find(job);
  return it == rounds_.end() ? nullptr : &it->second.store;
}

CoordJob& Coordinator::live_round(const std::string& job, uint64_t generation,
                                  const std::string& what) {
  auto it = rounds_.find(job);
  if (it == rounds_.end())
    throw Error(ErrorCode::kUnknownJob, "no multi-node job '" + job + "' is coordinated here");
  CoordJob& cj = it->second;
  heard(cj);
  if (!cj.closed || cj.generation != generation)
    throw Error(ErrorCode::kStaleGeneration,
                what + " from generation " + std::to_string(generation) + " refused: job '" + job +
                    "' is at generation " + std::to_string(cj.generation) +
                    (cj.closed || what != "request" ? "" : " (forming)"));
  if (!cj.broken.empty())
    throw Error(ErrorCode::kPeerExited, "job '" + job + "' generation " +
                                            std::to_string(cj.generation) +
                                            " cannot go on: " + cj.broken);
  return cj;
}

void Coordinator::rank_exited(const proto::RankExited& m, std::vector<Outgoing>& out) {
  if (log::enabled(log::Level::kDebug))
    log::debug(log::job(m.job), "job=" + m.job + " rank_exited: rank " + std::to_string(m.rank) +
                                    " and " + std::to_string(m.also.size()) + " more");
  auto it = rounds_.find(m.job);
  if (it != rounds_.end() && it->second.closed && it->second.generation == m.generation &&
      m.rank < it->second.store.global_world_size) {
    Job& store = it->second.store;
    store.exited_ranks.insert(m.rank);
    for (int64_t r : m.also)  // ended with it (a batch, from a relay)
      if (r < store.global_world_size) store.exited_ranks.insert(static_cast<uint32_t>(r));
    OutAnswers a(out);
    std::string more =
        m.also.empty() ? "" : " (and " + std::to_string(m.also.size()) + " more rank(s))";
    store_.fail_barriers(store, std::to_string(m.rank) + " " + m.why + more, a);
  }
}

void Coordinator::node_leave(const proto::NodeLeave& m, std::vector<Outgoing>& out) {
  auto it = rounds_.find(m.job);
  if (it == rounds_.end()) return;
  if (log::enabled(log::Level::kDebug))
    log::debug(log::job(m.job), "job=" + m.job + " node_leave from " + m.node_id + " with " +
                                    std::to_string(m.also.size()) + " more node(s)");
  // Its own leave, and those it passes on for nodes below it (relays).
  mark_left(it->second, m.job, m.generation, m.node_id);
  for (const auto& id : m.also) mark_left(it->second, m.job, m.generation, id);
  maybe_ended(m.job, out);
}

bool Coordinator::mark_left(CoordJob& cj, const std::string& job, uint64_t generation,
                            const std::string& node_id) {
  RoundNode* n = member(cj, node_id);
  if (!n || n->left || cj.generation != generation) return false;
  n->left = true;
  log::info(log::peer(n->node_id, job), "job=" + job + " " + node_name(*n) + " is done");
  return true;
}

void Coordinator::maybe_ended(const std::string& job, std::vector<Outgoing>& out) {
  auto it = rounds_.find(job);
  if (it == rounds_.end()) return;
  CoordJob& cj = it->second;
  bool all_left =
      std::all_of(cj.nodes.begin(), cj.nodes.end(), [](const RoundNode& n) { return n.left; });
  if (!cj.closed || !all_left || !cj.waiting.empty()) return;
  fail_store_waiters(cj.store, ErrorCode::kPeerExited, "job '" + job + "' ended on every node",
                     out);
  log::info(log::job(job), "job=" + job + " (coordinated here) ended on every node");
  samplers_.round_ended(job, cj, Clock::now(), peer_timeout_);
  rounds_.erase(it);
  save_wanted_ = true;
}

void Coordinator::node_join(const ReplyTo& to, const proto::NodeJoin& m,
                            const std::map<std::string, Job>& local_jobs,
                            std::vector<Outgoing>& out, bool batched) {
  auto now = Clock::now();
  check_local_owner(local_jobs, m);
  auto [it, fresh] = rounds_.try_emplace(m.job);
  CoordJob& cj = heard(it->second);
  if (fresh) {
    cj.min_nodes = m.min_nodes;
    cj.max_nodes = m.max_nodes;
    cj.last_call_ms = m.last_call_ms;
    cj.owner_uid = m.owner_uid;
    cj.store.id = m.job;
    cj.store.global = true;
    samplers_.round_started(m.job, m.owner_uid);
    log::info(log::job(m.job), "job=" + m.job +
                                   " coordinated here: " + std::to_string(m.min_nodes) + ".." +
                                   std::to_string(m.max_nodes) + " node(s)");
  } else if (cj.owner_uid != m.owner_uid) {
    // Another user's job of the same name on some node must not join this
    // world and read or write its store.
    throw Error(ErrorCode::kPermissionDenied,
                "job '" + m.job + "' is coordinated here for uid " + std::to_string(cj.owner_uid) +
                    "; on node " + m.node_id + " it belongs to uid " + std::to_string(m.owner_uid));
  } else if (cj.min_nodes != m.min_nodes || cj.max_nodes != m.max_nodes) {
    fail(to, ErrorCode::kConflict,
         "job '" + m.job + "' runs with " + std::to_string(cj.min_nodes) + ":" +
             std::to_string(cj.max_nodes) + " nodes, but node " + m.node_id + " asks for " +
             std::to_string(m.min_nodes) + ":" + std::to_string(m.max_nodes),
         out);
    if (fresh) rounds_.erase(it);
    return;
  }
  RoundNode n = round_node(to, m, now, batched);
  samplers_.run_joined(m.job, m.run);
  if (cj.closed) {
    const bool in_round = member(cj, m.node_id) != nullptr;
    if (!in_round && cj.broken.empty()) {
      // The world of this generation is formed: wait for the next one
      // (its members restart when they hear that nodes are waiting).
      if (RoundNode* w = find_node(cj.waiting, m.node_id))
        *w = std::move(n);
      else
        cj.waiting.push_back(std::move(n));
      log::info(log::peer(m.node_id, m.job), "job=" + m.job + " node " + m.node_id +
                                                 " waits for generation " +
                                                 std::to_string(cj.generation + 1));
      return;
    }
    // A member that joins again restarted: this generation is over. With
    // nodes waiting, that is the membership change they asked for.
    cj.membership_change = cj.broken.empty() && !cj.waiting.empty();
    if (cj.broken.empty())
      break_round(cj,
                  cj.membership_change
                      ? std::to_string(cj.waiting.size()) + " node(s) join in generation " +
                            std::to_string(cj.generation + 1)
                      : "node " + m.node_id + " restarted",
                  out, !cj.membership_change);
    cj.generation += 1;
    cj.closed = false;
    cj.last_call.reset();
    cj.nodes.clear();
    log::info(log::job(m.job),
              "job=" + m.job + " generation " + std::to_string(cj.generation) + " forms");
  }
  if (RoundNode* old = open_member(cj, m.node_id))
    *old = std::move(n);
  else
    open_add(cj, std::move(n));
  // Nodes that waited for this round join it, as far as it has room.
  while (!cj.waiting.empty() && cj.nodes.size() < cj.max_nodes) {
    if (!open_member(cj, cj.waiting.front().node_id)) open_add(cj, std::move(cj.waiting.front()));
    cj.waiting.erase(cj.waiting.begin());
  }
  if (cj.nodes.size() >= cj.max_nodes && !awaiting_restored(cj)) return close_round(cj, out);
  if (cj.nodes.size() >= cj.min_nodes && !cj.last_call)
    cj.last_call = now + std::chrono::milliseconds(cj.last_call_ms);
}

// Broadcasts go node to node when every node's daemon takes peers (each
// serves the next): else through this daemon, which carries the bytes.
// Logged either way.
static bool chained(const std::string& job, uint64_t generation,
                    const std::vector<RoundNode*>& order) {
  const RoundNode* deaf = nullptr;
  for (auto* node : order)
    if (!deaf && (node->peer_endpoint.empty() || !node->chain)) deaf = node;
  const std::string gen = "job=" + job + " generation " + std::to_string(generation);
  if (order.size() > 1 && !deaf)
    log::info(log::job(job), gen + ": broadcasts go node to node along a chain");
  else if (order.size() > 1)
    log::notice(log::job(job), gen + ": broadcasts go through the coordinator, not node to " +
                                   "node: " + node_name(*deaf) +
                                   (deaf->peer_endpoint.empty()
                                        ? " does not listen for peers (musterd --peer-bind)"
                                        : " runs a musterd from before chains"));
  return order.size() > 1 && !deaf;
}

// The relay tree, over tree positions rather than node ranks: the nodes
// that listen for children take the first positions (in node rank order),
// the others the rest, and position p's children are positions
// (p+1)W .. (p+1)W+W-1 (the coordinator's: 0..W-1). So a node that does
// not listen is always a leaf, and when every node listens positions are
// node ranks. A tree only when it pays (more nodes than W) and enough nodes
// listen to hold every position that has children; else a flat star.
RelayTree relay_tree(const std::vector<RoundNode*>& order, uint32_t width) {
  const size_t n = order.size();
  if (width == 0 || n <= width) return {};
  std::vector<size_t> at;  // position -> node rank
  at.reserve(n);
  for (bool listens : {true, false})
    for (size_t r = 0; r < n; ++r)
      if (order[r]->peer_endpoint.empty() != listens) at.push_back(r);
  const size_t interior = (n - 1) / width;  // positions 0..interior-1 have children
  if (interior > 0 && order[at[interior - 1]]->peer_endpoint.empty()) return {};
  RelayTree t;
  t.parent.assign(n, -1);
  t.subtree.assign(n, 0);
  std::vector<uint32_t> below(n, 0);  // by position
  for (size_t p = n; p-- > 0;) {
    below[p] += order[at[p]]->nproc;
    if (p >= width) {
      below[p / width - 1] += below[p];
      t.parent[at[p]] = static_cast<int64_t>(at[p / width - 1]);
    }
    t.subtree[at[p]] = below[p];
  }
  return t;
}

void Coordinator::close_round(CoordJob& cj, std::vector<Outgoing>& out) {
  samplers_.runs_decided(cj.store.id);
  size_t n = cj.nodes.size();
  // Node ranks: the asked-for ones first, then the rest by the rank they
  // had before (stable across generations), then by node id: the same set
  // of nodes always gets the same order.
  std::vector<RoundNode*> order(n, nullptr);
  std::vector<RoundNode*> rest;
  for (auto& node : cj.nodes) {
    if (node.want_rank >= 0 && static_cast<size_t>(node.want_rank) < n && !order[node.want_rank])
      order[node.want_rank] = &node;
    else
      rest.push_back(&node);
  }
  auto prev = [&](const RoundNode* x) {
    auto it = cj.previous.find(x->node_id);
    return it == cj.previous.end() ? UINT32_MAX : it->second;
  };
  std::sort(rest.begin(), rest.end(), [&](const RoundNode* a, const RoundNode* b) {
    return std::make_pair(prev(a), a->node_id) < std::make_pair(prev(b), b->node_id);
  });
  size_t k = 0;
  for (auto& slot : order)
    if (!slot) slot = rest[k++];
  uint32_t offset = 0;
  std::vector<uint32_t> offsets(n);
  for (size_t r = 0; r < n; ++r) {
    order[r]->node_rank = static_cast<uint32_t>(r);
    offsets[r] = offset;
    offset += order[r]->nproc;
  }
  const RelayTree t = relay_tree(order, tree_width_);
  const bool tree = !t.parent.empty();
  generation_formed(cj, out);
  cj.previous.clear();
  for (auto* node : order) cj.previous[node->node_id] = node->node_rank;
  Job& store = cj.store;
  store.generation = cj.generation;
  store.global_world_size = offset;
  store.exited_ranks.clear();
  store.broken.clear();
  log::info(log::job(store.id),
            "job=" + store.id + " generation " + std::to_string(cj.generation) +
                " formed: " + std::to_string(n) + " node(s), world size " + std::to_string(offset) +
                (tree ? ", relay tree of width " + std::to_string(tree_width_) : ", star"));
  const bool chain = chained(store.id, cj.generation, order);
  auto now = Clock::now();
  WorldsOut worlds;
  for (size_t r = 0; r < n; ++r) {
    RoundNode& node = *order[r];
    node.last_seen = now;
    proto::World w{store.id,
                   cj.generation,
                   node.node_rank,
                   static_cast<uint32_t>(n),
                   offsets[r],
                   offset,
                   order[0]->master_addr,
                   order[0]->master_port,
                   tree && t.parent[r] >= 0 ? order[t.parent[r]]->peer_endpoint : "",
                   tree ? t.subtree[r] : node.nproc};
    if (chain) {
      w.chain_prev = order[(r + n - 1) % n]->peer_endpoint;
      w.chain_next_nproc = order[(r + 1) % n]->nproc;
    }
    worlds.add(node, w, out);
  }
  worlds.send(out);
}

void Coordinator::generation_formed(CoordJob& cj, std::vector<Outgoing>& out) {
  // Waits of the generation before that nobody stopped: answered now, not
  // by this generation's keys and barriers.
  fail_store_waiters(cj.store, ErrorCode::kStaleGeneration,
                     "job '" + cj.store.id + "': generation " + std::to_string(cj.generation) +
                         " replaced the one this request waited in",
                     out);
  cj.closed = true;
  cj.broken.clear();
  cj.last_call.reset();
  // Broadcasts are numbered per generation (client/lib/broadcast/nodes.cpp).
  cj.bcast_seq = cj.restored_bcast_seq = cj.restarted_counted = 0;
  save_wanted_ = true;
}

void Coordinator::fail_store_waiters(Job& store, ErrorCode code, const std::string& why,
                                     std::vector<Outgoing>& out) {
  OutAnswers a(out);
  store_.fail_all(store, code, why, a);
}

void Coordinator::break_round(CoordJob& cj, const std::string& why, std::vector<Outgoing>& out,
                              bool fail_waiters) {
  cj.broken = why;
  cj.store.broken = why;
  save_wanted_ = true;
  log::warning(log::job(cj.store.id), "job=" + cj.store.id + " generation " +
                                          std::to_string(cj.generation) + " cannot go on: " + why);
  // A membership change leaves the old generation's waits alone: their
  // launchers stop those ranks anyway (not as a failure), and a wait that
  // failed first would look like one. close_round fails what is left.
  if (!fail_waiters) return;
  fail_store_waiters(
      cj.store, ErrorCode::kPeerExited,
      "job '" + cj.store.id + "' generation " + std::to_string(cj.generation) + ": " + why, out);
}

// A subtree's arrivals at a barrier of the job's global store.
void Coordinator::barrier_up(const ReplyTo& to, const proto::BarrierUp& m,
                             std::vector<Outgoing>& out) {
  Job& store = live_round(m.job, m.generation, "barrier").store;
  if (!store.exited_ranks.empty())
    throw Error(ErrorCode::kPeerExited,
                "barrier '" + m.name + "' of job '" + m.job + "' cannot complete: rank " +
                    std::to_string(*store.exited_ranks.begin()) + " has exited");
  auto& b = store.barriers[m.name];
  if (b.count + m.count > store.global_world_size)
    throw Error(ErrorCode::kConflict, "barrier '" + m.name + "' of job '" + m.job + "' got " +
                                          std::to_string(b.count + m.count) +
                                          " arrivals for a world of " +
                                          std::to_string(store.global_world_size));
  OutAnswers a(out);
  store_.arrive(store, to, m.name, 0, m.count, store.global_world_size,
                Clock::now() + std::chrono::milliseconds(m.timeout_ms), a);
}

CoordJob& Coordinator::bcast_job(const std::string& job, uint64_t generation,
                                 const std::string& forwarding) {
  check_forwarded(job, forwarding);
  CoordJob& cj = rounds_.at(job);
  if (generation != cj.generation)
    throw Error(ErrorCode::kConflict, "broadcast of generation " + std::to_string(generation) +
                                          " refused: job '" + job + "' is at generation " +
                                          std::to_string(cj.generation));
  return cj;
}

void Coordinator::bcast_push(const ReplyTo& to, const proto::BcastPushView& m,
                             const std::string& forwarding, std::vector<Outgoing>& out,
                             const PoolFile* from) {
  bcasts_.push(to, m, bcast_job(m.job, m.generation, forwarding), out, from);
}

void Coordinator::bcast_pull(const ReplyTo& to, const proto::BcastPull& m,
                             const std::string& forwarding, std::vector<Outgoing>& out) {
  bcasts_.pull(to, m, bcast_job(m.job, m.generation, forwarding), out);
}

void Coordinator::bcast_leave(const ReplyTo& to, const proto::BcastLeave& m,
                              const std::string& forwarding, std::vector<Outgoing>& out) {
  bcasts_.leave(to, m, bcast_job(m.job, m.generation, forwarding), out);
}

// Joins that come through relays (doc/protocol.md, "Many nodes"): a relay
// batches its children's NodeJoins into one NodeJoins, and the coordinator
// answers the Worlds of one relay's children in one Replies. So a round of
// thousands of nodes costs the coordinator O(relays) messages each way,
// not one per node.
void Coordinator::node_joins(const ReplyTo& to, const proto::NodeJoins& m,
                             const std::map<std::string, Job>& local_jobs,
                             std::vector<Outgoing>& out) {
  if (log::enabled(log::Level::kDebug))
    log::debug(log::job(m.job), "job=" + m.job + " node_joins: " + std::to_string(m.joins.size()) +
                                    " join(s) from a relay");
  for (const auto& f : m.joins) {
    ReplyTo inner = to;
    try {
      // Each under its own request id: the relay passes its answer on to
      // the child that asked.
      auto env = proto::decode_envelope(f.frame.data(), f.frame.size());
      inner.request_id = env.request_id;
      if (static_cast<MsgType>(env.type) != MsgType::kNodeJoin)
        throw Error(ErrorCode::kUnknownType,
                    std::string("a batch of joins holds node_join only, not '") +
                        (proto::type_name(env.type) ? proto::type_name(env.type) : "?") + "'");
      auto join = proto::NodeJoin::unpack(env.payload);
      if (join.job != m.job)
        throw Error(ErrorCode::kPermissionDenied,
                    "a batch of joins for job '" + m.job + "' may not join job '" + join.job + "'");
      if (join.relay)
        throw Error(ErrorCode::kInvalidArgument,
                    "a batched join is for the coordinator (relay unset)");
      node_join(inner, join, local_jobs, out, true);
    } catch (const proto::EnvelopeError& e) {
      inner.request_id = e.request_id;
      fail(inner, e.code(), std::string("a batched join: ") + e.what(), out);
    } catch (const Error& e) {
      fail(inner, e.code(), e.what(), out);
    }
  }
}

void Coordinator::WorldsOut::add(const RoundNode& node, const proto::World& w,
                                 std::vector<Outgoing>& out) {
  if (!node.batched) return send_reply(out, node.to, w);
  auto& [to, replies] = batches[node.to.routing_id];
  to = node.to;
  to.request_id = 0;
  replies.replies.push_back({proto::encode(node.to.request_id, w)});
}

void Coordinator::WorldsOut::send(std::vector<Outgoing>& out) {
  for (auto& [routing, b] : batches) {
    auto& all = b.second.replies;
    for (size_t i = 0; i < all.size(); i += proto::kMaxBatchedJoins) {
      proto::Replies part;
      const size_t end = std::min(all.size(), i + proto::kMaxBatchedJoins);
      part.replies.assign(std::make_move_iterator(all.begin() + i),
                          std::make_move_iterator(all.begin() + end));
      out.push_back({b.first, proto::encode(0, part)});
    }
  }
}

}  // namespace muster::daemon
