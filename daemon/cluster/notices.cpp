// A node's notices to the coordinator that something ended (rank_exited,
// node_leave), batched and sent through the relay tree: a teardown of N
// nodes of R ranks costs the coordinator O(width) messages, not N * R.
// Ranks that ended wait kExitedBatch for company; a parent takes its
// children's into its own batch (and fails its subtree's barriers at once,
// as the coordinator would). A parent that refuses (its part of the job
// is over) or lets a notice wait half the peer timeout is passed over:
// the coordinator is told directly (notices.hpp).
#include "cluster/notices.hpp"

#include "core/out_answers.hpp"
#include "log.hpp"

namespace muster::daemon {

using proto::MsgType;

namespace {

// How long an ended rank waits for others to go upstream with (the ranks
// of a job end within moments of each other at its end).
constexpr auto kExitedBatch = std::chrono::milliseconds(50);
// Leaves of children after this node's own are gathered this long.
constexpr auto kLateBatch = std::chrono::milliseconds(200);

// At most the world's ranks are held (a child's batch past that, or with
// ranks outside the world, is refused: it tells the coordinator itself).
void add_exited(std::vector<int64_t>& exited, std::string& why, Clock::time_point& first,
                int64_t rank, const std::vector<int64_t>& also, const std::string& reason,
                uint32_t world_size) {
  if (exited.size() + 1 + also.size() > world_size)
    throw Error(ErrorCode::kUnavailable, "this relay holds " + std::to_string(exited.size()) +
                                             " ended ranks already; tell the coordinator");
  auto check = [&](int64_t r) {
    if (r >= world_size)
      throw Error(
          ErrorCode::kInvalidArgument,
          "rank " + std::to_string(r) + " is not in a world of " + std::to_string(world_size));
  };
  check(rank);
  for (int64_t r : also) check(r);
  if (exited.empty()) {
    first = Clock::now();
    why = reason;
  }
  exited.push_back(rank);
  exited.insert(exited.end(), also.begin(), also.end());
}

// Sends m to `link`, to be answered as p says.
template <class M>
void send_to(Relays::Links& links, const std::string& link, LinkPending p, const M& m,
             std::vector<Outgoing>& out) {
  links.send_relayed(
      link, std::move(p), [&](uint64_t id) { return proto::encode(id, m); }, out);
}

}  // namespace

// The relay state of a formed job at `generation`, reset when it was of an
// older one; null when this node has no such world.
RelayState* Notices::relay_of(const std::string& job_id, uint64_t generation) {
  const Job* job = jobs_.find(job_id);
  if (!job || !job->cluster || !job->cluster->formed || job->generation != generation)
    return nullptr;
  RelayState& r = relays_.of(job_id);
  if (r.below_generation != generation) {
    r.below.clear();
    r.left.clear();
    r.left_base = 0;
    r.exited.clear();
    r.below_generation = generation;
  }
  return &r;
}

void Notices::leave(const proto::NodeLeave& m) {
  std::vector<std::string>* left = nullptr;
  size_t limit = proto::kMaxNodes;
  if (RelayState* r = relay_of(m.job, m.generation)) {
    limit = jobs_.find(m.job)->cluster->num_nodes;
    r->below.erase(m.node_id);
    for (const auto& id : m.also) r->below.erase(id);
    left = &r->left;
  } else if (auto it = late_.find(m.job); it != late_.end() &&
                                          it->second.generation == m.generation &&
                                          Clock::now() < it->second.until) {
    left = &it->second.left;
    limit = it->second.num_nodes;
    if (left->empty() && it->second.exited.empty()) it->second.first = Clock::now();
  }
  if (!left)
    throw Error(ErrorCode::kUnknownJob, "this daemon relays no job '" + m.job + "' at generation " +
                                            std::to_string(m.generation) +
                                            "; tell the coordinator");
  if (left->size() + 1 + m.also.size() > limit)
    throw Error(ErrorCode::kUnavailable, "this relay holds " + std::to_string(left->size()) +
                                             " leaves of job '" + m.job +
                                             "' already; tell the coordinator");
  left->push_back(m.node_id);
  left->insert(left->end(), m.also.begin(), m.also.end());
}

void Notices::exited(const proto::RankExited& m, std::vector<Outgoing>& out) {
  if (RelayState* r = relay_of(m.job, m.generation)) {
    add_exited(r->exited, r->exited_why, r->exited_first, m.rank, m.also, m.why,
               jobs_.find(m.job)->cluster->world_size);
    // No barrier of this subtree can complete now.
    std::string why = "barrier of job '" + m.job + "' cannot complete: rank " +
                      std::to_string(m.rank) + " " + m.why;
    for (auto& [name, b] : r->barriers)
      for (const auto& w : b.waiters) send_error(out, w, ErrorCode::kPeerExited, why);
    r->barriers.clear();
    return;
  }
  auto it = late_.find(m.job);
  if (it == late_.end() || it->second.generation != m.generation ||
      Clock::now() >= it->second.until)
    throw Error(ErrorCode::kUnknownJob, "this daemon relays no job '" + m.job + "' at generation " +
                                            std::to_string(m.generation) +
                                            "; tell the coordinator");
  LateLeaves& late = it->second;
  Clock::time_point first = late.first;
  bool fresh = late.left.empty() && late.exited.empty();
  add_exited(late.exited, late.exited_why, first, m.rank, m.also, m.why, late.world_size);
  if (fresh) late.first = first;
}

void Notices::queue_exited(Job& job, uint32_t rank, const char* why, std::vector<Outgoing>& out) {
  RelayState* r = relay_of(job.id, job.generation);
  if (!r) return;
  try {
    add_exited(r->exited, r->exited_why, r->exited_first, rank, {}, why, job.cluster->world_size);
  } catch (const Error&) {
    // Full of what children sent: this node's own goes as it is, now.
    proto::RankExited m{job.id, job.generation, rank, why};
    send_to(links_, job.cluster->coordinator, {LinkPending::Kind::kNotice, {}, job.id}, m, out);
  }
}

// The ended ranks of a job gathered here go upstream: to the parent (the
// tree's way) or the coordinator.
void Notices::send_exited(const Job& job, RelayState& r, std::vector<Outgoing>& out) {
  if (r.exited.empty()) return;
  const ClusterInfo& c = *job.cluster;
  proto::RankExited m{job.id, job.generation, static_cast<uint32_t>(r.exited.front()),
                      std::exchange(r.exited_why, {})};
  m.also.assign(r.exited.begin() + 1, r.exited.end());
  r.exited.clear();
  if (c.parent.empty() || c.beat_direct)
    return (void)send_to(links_, c.coordinator, {LinkPending::Kind::kNotice, {}, job.id}, m, out);
  m.relay = true;
  send_to(links_, c.parent, {LinkPending::Kind::kRelayNotice, {}, job.id, c.coordinator}, m, out);
}

// A notice its parent refused or let wait: the coordinator is told itself.
void Notices::direct(const LinkPending& p, std::vector<Outgoing>& out) {
  auto env = proto::decode_envelope(p.frame.data(), p.frame.size());
  LinkPending notice{LinkPending::Kind::kNotice, {}, p.job};
  if (static_cast<MsgType>(env.type) == MsgType::kNodeLeave) {
    auto m = proto::NodeLeave::unpack(env.payload);
    m.relay = false;
    send_to(links_, p.key, std::move(notice), m, out);
  } else if (static_cast<MsgType>(env.type) == MsgType::kRankExited) {
    auto m = proto::RankExited::unpack(env.payload);
    m.relay = false;
    send_to(links_, p.key, std::move(notice), m, out);
  }
}

void Notices::tick(Clock::time_point now, std::vector<Outgoing>& out) {
  for (const auto& p : take_late_(now - peer_timeout_ / 2)) direct(p, out);
  for (auto& [id, r] : relays_.all())
    if (!r.exited.empty() && now - r.exited_first >= kExitedBatch)
      if (const Job* job = jobs_.find(id);
          job && job->cluster && job->generation == r.below_generation)
        send_exited(*job, r, out);
  for (auto it = late_.begin(); it != late_.end();) {
    LateLeaves& late = it->second;
    bool due = now - late.first >= kLateBatch || now >= late.until;
    // Up the tree as this node's own went (the parent takes them into its
    // batch, or its own late one), else to the coordinator.
    const bool relay = !late.parent.empty();
    auto pass_up = [&](auto m) {
      m.relay = relay;
      if (relay)
        send_to(links_, late.parent,
                {LinkPending::Kind::kRelayNotice, {}, it->first, late.coordinator}, m, out);
      else
        send_to(links_, late.coordinator, {LinkPending::Kind::kNotice, {}, it->first}, m, out);
    };
    if (due && !late.exited.empty()) {
      proto::RankExited m{it->first, late.generation, static_cast<uint32_t>(late.exited.front()),
                          std::exchange(late.exited_why, {})};
      m.also.assign(late.exited.begin() + 1, late.exited.end());
      late.exited.clear();
      pass_up(std::move(m));
    }
    if (due && !late.left.empty())
      pass_up(proto::NodeLeave{it->first, late.generation, node_id_, std::exchange(late.left, {})});
    it = now >= late.until ? late_.erase(it) : std::next(it);
  }
}

}  // namespace muster::daemon
