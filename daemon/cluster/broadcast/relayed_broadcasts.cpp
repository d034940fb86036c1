// Broadcast across nodes, the coordinator's part (see
// cluster/broadcast/relayed_broadcasts.hpp and doc/protocol.md, "Broadcast across
// nodes"). Requests arrive inside Forward, so forward_in has checked the
// job, its generation and that its world is not broken; tick() fails what
// waits when that changes.
#include <malloc.h>

#include <algorithm>
#include <charconv>

#include "cluster/broadcast/bcast_fail.hpp"
#include "cluster/broadcast/pool_files.hpp"
#include "cluster/broadcast/relayed_broadcasts.hpp"
#include "core/out_answers.hpp"
#include "log.hpp"

namespace muster::daemon {

using proto::MsgType;

// Not zeroed first: every byte is written.
BcastRelay::Chunk shared_chunk(const proto::BcastPushView& m, size_t nodes, const PoolFile* from) {
  const uint64_t bytes = from ? std::min(m.chunk, m.size - m.index * m.chunk) : m.data.size();
  codec::Buffer head;
  codec::Packer p(head);
  proto::pack_envelope_head(p, 0, static_cast<uint16_t>(MsgType::kBcastChunk));
  proto::BcastChunk name;
  name.index = m.index, name.sum = m.sum, name.job = m.job, name.generation = m.generation;
  name.seq = m.seq, name.root = m.root;
  proto::BcastChunk::pack_shared_head(p, name, bytes);
  BcastRelay::Chunk c;
  c.size = head.size() + bytes;
  c.data_at = head.size();
  const uint64_t at = from ? m.pool.offset + m.index * m.chunk : 0;
  // From a sealed pool: its pages themselves, behind the head.
  if (auto mapped = from ? map_chunk(*from, {head.data(), head.size()}, at, bytes) : std::nullopt) {
    c.frame =
        std::shared_ptr<char>(std::move(mapped->held), const_cast<char*>(mapped->frame.data()));
  } else {
    c.frame = std::shared_ptr<char>(new char[c.size], std::default_delete<char[]>());
    std::copy(head.data(), head.data() + head.size(), c.frame.get());
    if (from)
      from->read(at, c.frame.get() + c.data_at, bytes);
    else
      std::copy(m.data.begin(), m.data.end(), c.frame.get() + c.data_at);
  }
  c.bytes = bytes;
  c.sum = m.sum;
  c.served.assign(nodes, false);
  return c;
}

namespace {

constexpr auto kTrimAfter = std::chrono::seconds(5);  // see RelayedBroadcasts::trim_at_

void send_error_to(const ReplyTo& to, ErrorCode code, const std::string& why,
                   std::vector<Outgoing>& out) {
  send_error(out, to, code, why);
}

// A frame of its own for a pull that is not shared: its request id
// full-width (0xcf and 8 bytes), so that a node daemon passes it on to its
// rank as it came, with the rank's id in its place (NodeLinks::pass_on).
std::string own_frame(const BcastRelay::Chunk& c, uint64_t index, uint64_t request_id) {
  codec::Buffer head;
  codec::Packer p(head);
  proto::pack_envelope_head(p, UINT64_MAX, static_cast<uint16_t>(MsgType::kBcastChunk));
  proto::BcastChunk::pack_head(p, index, c.sum, c.bytes);
  std::string frame;
  frame.reserve(head.size() + c.bytes);
  frame.append(head.data(), head.size());
  size_t id_at = frame.find("\xcf\xff\xff\xff\xff\xff\xff\xff\xff");
  if (id_at == std::string::npos)
    throw Error(ErrorCode::kInternal, "bcast_chunk frame without a full-width request id");
  for (int b = 0; b < 8; ++b) frame[id_at + 1 + b] = static_cast<char>(request_id >> (56 - 8 * b));
  frame.append(c.frame.get() + c.data_at, c.bytes);
  return frame;
}

Clock::time_point deadline(int64_t ms) {
  return Clock::now() + std::chrono::milliseconds(ms);
}

// A rank's pool is its own daemon's to open (cluster/bcast_pools.cpp); a
// coordinator takes bytes, from whichever node.
void no_pool(const proto::PoolRef& pool, const char* what) {
  if (pool.set())
    throw Error(ErrorCode::kInvalidArgument,
                std::string(what) + " names a rank's broadcast pool, which only the rank's own " +
                    "daemon opens: a coordinator takes the bytes");
}

std::string name_of(const std::string& job, uint64_t seq, uint32_t root) {
  return "broadcast #" + std::to_string(seq) + " of job '" + job + "' from rank " +
         std::to_string(root);
}

}  // namespace

// A broadcast whose chunks were held by this daemon before it restarted:
// every rank starts it again (client/lib/broadcast/nodes.cpp). Counted in
// the job's store, once per broadcast, as relayed bytes are.
void RelayedBroadcasts::restarted_check(CoordJob& cj, const std::string& job, uint64_t seq,
                                        uint32_t root) {
  if (seq > cj.restored_bcast_seq) return;
  if (seq > cj.restarted_counted) {
    cj.restarted_counted = seq;
    const std::string kRestartedKey = "muster/bcast/restarted";
    uint64_t before = 0;
    if (const std::string* v = cj.store.kv.find(kRestartedKey))
      std::from_chars(v->data(), v->data() + v->size(), before);
    cj.store.kv.set(kRestartedKey, std::to_string(before + 1));
  }
  throw Error(ErrorCode::kRestarted, name_of(job, seq, root) +
                                         " was under way when the job's coordinating daemon "
                                         "restarted; the ranks start it again");
}

BcastRelay& RelayedBroadcasts::relay(CoordJob& cj, const std::string& job, uint64_t seq,
                                     uint32_t root, uint64_t size, uint64_t chunk,
                                     std::vector<Outgoing>& out) {
  auto name = [&] { return name_of(job, seq, root); };
  BcastRelays& rs = by_job_[job];
  if (rs.generation != cj.generation) {
    for (auto& [s, r] : rs.by_seq)
      fail_cast(
          r, ErrorCode::kConflict,
          "generation " + std::to_string(rs.generation) + " of job '" + job + "' was replaced",
          out);
    rs = BcastRelays{};
    rs.generation = cj.generation;
  }
  auto it = rs.by_seq.find(seq);
  if (it == rs.by_seq.end()) {
    if (seq < rs.max_seq)
      throw Error(ErrorCode::kConflict,
                  name() + " is over: the job's collectives are at #" + std::to_string(rs.max_seq));
    restarted_check(cj, job, seq, root);
    if (seq > cj.bcast_seq) {
      cj.bcast_seq = seq;
      save_wanted_ = true;  // before any chunk of it is acknowledged
    }
    if (!cj.store.exited_ranks.empty())
      throw Error(ErrorCode::kPeerExited, name() + " cannot complete: rank " +
                                              std::to_string(*cj.store.exited_ranks.begin()) +
                                              " has exited");
    // Every rank passed the done barrier of each earlier collective before
    // any rank started this one: what is left of those was abandoned.
    for (auto& [s, r] : rs.by_seq)
      fail_cast(r, ErrorCode::kConflict, name_of(job, s, r.root) + " was abandoned", out);
    rs.by_seq.clear();
    // The root's node: node ranks in order, each with its nproc ranks.
    std::vector<const RoundNode*> order(cj.nodes.size(), nullptr);
    for (const auto& n : cj.nodes)
      if (n.node_rank < order.size()) order[n.node_rank] = &n;
    uint64_t offset = 0;
    int64_t root_node = -1;
    for (size_t k = 0; k < order.size(); ++k) {
      if (!order[k])
        throw Error(ErrorCode::kInternal, "job '" + job + "' lacks node rank " + std::to_string(k));
      if (root >= offset && root < offset + order[k]->nproc) root_node = static_cast<int64_t>(k);
      offset += order[k]->nproc;
    }
    if (root_node < 0)
      throw Error(ErrorCode::kInvalidArgument, name() + ": the root is outside the world of " +
                                                   std::to_string(offset) + " rank(s)");
    BcastRelay r;
    r.root = root;
    r.root_node = static_cast<uint32_t>(root_node);
    r.size = size;
    r.chunk = chunk;
    r.chunks = (size + chunk - 1) / chunk;
    r.pullers = static_cast<uint32_t>(order.size() - 1);
    r.window = bcast_window(chunk);
    r.have.assign(order.size(), 0);
    r.have[r.root_node] = BcastRelay::kGone;
    rs.max_seq = seq;
    it = rs.by_seq.emplace(seq, std::move(r)).first;
  }
  BcastRelay& r = it->second;
  if (r.root != root || r.size != size || r.chunk != chunk)
    throw Error(ErrorCode::kInvalidArgument, name_of(job, seq, r.root) + " has " +
                                                 std::to_string(r.size) + " bytes in chunks of " +
                                                 std::to_string(r.chunk) + ", not from rank " +
                                                 std::to_string(root) + " " + std::to_string(size) +
                                                 " bytes in chunks of " + std::to_string(chunk));
  if (r.failed != ErrorCode::kOk) throw Error(r.failed, r.why);
  if (r.finished) throw Error(ErrorCode::kConflict, name() + " is over");
  return r;
}

// A shared pull is sent the chunk's one frame; another, a copy of its own.
// The frame goes once every pulling node was sent it.
void RelayedBroadcasts::serve(BcastRelay& r, const BcastRelay::Parked& pull, BcastRelay::Chunk& c,
                              std::vector<Outgoing>& out) {
  if (!c.frame)  // every node had it: this node asks again
    return send_error_to(pull.to, ErrorCode::kConflict,
                         "chunk " + std::to_string(pull.index) + " was sent to every node already",
                         out);
  bool last = false;
  if (pull.node < c.served.size() && !c.served[pull.node]) {
    c.served[pull.node] = true;
    last = ++c.served_count == r.pullers;
  }
  if (pull.shared) {
    r.shared += c.bytes;
    Outgoing o{pull.to, {}};
    o.held = c.frame;
    o.body = std::string_view(c.frame.get(), c.size);
    out.push_back(std::move(o));
  } else {
    out.push_back({pull.to, own_frame(c, pull.index, pull.to.request_id)});
  }
  if (last) c.frame.reset();
  r.relayed += c.bytes;
}

void RelayedBroadcasts::fail_cast(BcastRelay& r, ErrorCode code, const std::string& why,
                                  std::vector<Outgoing>& out) {
  fail_broadcast(r, code, why, out, r.pushes, r.pulls);
}

// Drops the chunks every pulling node holds, answers the pushes that fit the
// window now, and ends the broadcast once the root pushed everything and no
// node needs more.
void RelayedBroadcasts::advance(CoordJob& cj, BcastRelay& r, std::vector<Outgoing>& out) {
  uint64_t low = r.chunks;
  for (auto h : r.have)
    if (h != BcastRelay::kGone) low = std::min(low, h);
  if (low > r.low) {
    r.held.erase(r.held.begin(), r.held.lower_bound(low));
    r.low = low;
  }
  std::erase_if(r.pushes, [&](const BcastRelay::Parked& p) {
    if (p.index >= r.low + r.window) return false;
    send_reply(out, p.to, proto::Ok{});
    return true;
  });
  bool all_left =
      std::all_of(r.have.begin(), r.have.end(), [](uint64_t h) { return h == BcastRelay::kGone; });
  if (!r.root_done || !all_left) return;
  r.finished = true;
  r.held.clear();
  for (const auto& p : r.pulls)
    send_error_to(p.to, ErrorCode::kConflict, "the broadcast is over: this node left it", out);
  r.pulls.clear();
  // Statistics in the job's store (muster/ is the library's part of it).
  for (auto [key, n] :
       {std::pair{"muster/bcast/relayed", r.relayed}, std::pair{"muster/bcast/shared", r.shared}}) {
    uint64_t before = 0;
    if (const std::string* v = cj.store.kv.find(key))
      std::from_chars(v->data(), v->data() + v->size(), before);  // 0 unless a count
    cj.store.kv.set(key, std::to_string(before + n));
  }
  log::info("job=" + cj.store.id + " generation " + std::to_string(cj.generation) +
            ": broadcast from rank " + std::to_string(r.root) + ", " + std::to_string(r.size) +
            " bytes, relayed " + std::to_string(r.relayed) + " bytes (" + std::to_string(r.shared) +
            " of them shared) to " + std::to_string(r.have.size() - 1) + " node(s)");
  OutAnswers a(out);
  store_.key_changed(cj.store, a);
  trim_at_ = Clock::now() + kTrimAfter;
}

std::string RelayedBroadcasts::BcastOf::name() const {
  return name_of(job, seq, root);
}

void RelayedBroadcasts::push(const ReplyTo& to, const proto::BcastPushView& m, CoordJob& cj,
                             std::vector<Outgoing>& out, const PoolFile* from) {
  if (!from) no_pool(m.pool, "bcast_push");
  BcastOf b = of(m, cj, out);
  BcastRelay& r = b.r;
  if (r.root_done)
    throw Error(ErrorCode::kConflict, b.name() + ": a chunk pushed after the root's last one");
  if (m.index >= r.low + 2 * r.window)
    throw Error(ErrorCode::kTooLarge,
                b.name() + ": chunk " + std::to_string(m.index) + " pushed before chunk " +
                    std::to_string(m.index - r.window) +
                    " had room: wait for a push's answer before running further ahead");
  if (m.index >= r.low && !r.held.count(m.index)) {
    // Made before anything changes: reading the root's pool may fail.
    auto& c = r.held.emplace(m.index, shared_chunk(m, r.have.size(), from)).first->second;
    std::erase_if(r.pulls, [&](const BcastRelay::Parked& p) {
      if (p.index != m.index) return false;
      serve(r, p, c, out);
      return true;
    });
  }
  r.pushed = std::max(r.pushed, m.index + 1);
  if (m.index >= r.low + r.window) {
    r.pushes.push_back({to, m.index, deadline(m.timeout_ms), r.root_node});
    return;
  }
  send_reply(out, to, proto::Ok{});
}

void RelayedBroadcasts::pull(const ReplyTo& to, const proto::BcastPull& m, CoordJob& cj,
                             std::vector<Outgoing>& out) {
  no_pool(m.pool, "bcast_pull");
  BcastOf b = of(m, cj, out);
  BcastRelay& r = b.r;
  if (m.node_rank >= r.have.size() || m.node_rank == r.root_node)
    throw Error(ErrorCode::kInvalidArgument, b.name() + ": node " + std::to_string(m.node_rank) +
                                                 " does not pull it (the root's node is " +
                                                 std::to_string(r.root_node) + " of " +
                                                 std::to_string(r.have.size()) + ")");
  uint64_t& have = r.have[m.node_rank];
  if (have == BcastRelay::kGone)
    throw Error(ErrorCode::kConflict,
                b.name() + ": node " + std::to_string(m.node_rank) + " has left it");
  if (m.index >= m.have + 2 * r.window)
    throw Error(ErrorCode::kTooLarge, b.name() + ": chunk " + std::to_string(m.index) +
                                          " asked for while holding only " +
                                          std::to_string(m.have) + " chunk(s)");
  have = std::max(have, m.have);
  advance(b.cj, r, out);
  BcastRelay::Parked pull{to, m.index, deadline(m.timeout_ms), m.node_rank, m.shared};
  if (auto c = r.held.find(m.index); c != r.held.end()) {
    serve(r, pull, c->second, out);
  } else if (m.index < r.low) {
    throw Error(ErrorCode::kConflict, b.name() + ": chunk " + std::to_string(m.index) +
                                          " was dropped: every node said it holds it");
  } else {
    r.pulls.push_back(std::move(pull));
  }
}

void RelayedBroadcasts::leave(const ReplyTo& to, const proto::BcastLeave& m, CoordJob& cj,
                              std::vector<Outgoing>& out) {
  BcastOf b = of(m, cj, out);
  BcastRelay& r = b.r;
  if (m.node_rank >= r.have.size())
    throw Error(ErrorCode::kInvalidArgument,
                b.name() + ": the job has no node " + std::to_string(m.node_rank));
  if (m.node_rank == r.root_node) {
    if (!m.why.empty()) {
      fail_cast(r, ErrorCode::kPeerExited, b.name() + " stopped on the root: " + m.why, out);
      return send_reply(out, to, proto::Ok{});
    }
    if (r.pushed != r.chunks)
      throw Error(ErrorCode::kInvalidArgument, b.name() + ": the root is done after " +
                                                   std::to_string(r.pushed) + " of " +
                                                   std::to_string(r.chunks) + " chunk(s)");
    r.root_done = true;
  } else {
    if (!m.why.empty())
      log::info(b.name() + ": node " + std::to_string(m.node_rank) + " gave up: " + m.why);
    r.have[m.node_rank] = BcastRelay::kGone;
    // Pipelined pulls of this node that it no longer waits for.
    std::erase_if(r.pulls, [&](const BcastRelay::Parked& p) {
      if (p.node != m.node_rank) return false;
      send_error_to(p.to, ErrorCode::kConflict,
                    b.name() + ": node " + std::to_string(p.node) + " left it", out);
      return true;
    });
  }
  advance(b.cj, r, out);
  send_reply(out, to, proto::Ok{});
}

void RelayedBroadcasts::tick(Clock::time_point now, std::vector<Outgoing>& out) {
  if (trim_at_ && now >= *trim_at_) {
    bool busy = false;
    for (const auto& [job, rs] : by_job_)
      for (const auto& [seq, r] : rs.by_seq) busy |= !r.finished && r.failed == ErrorCode::kOk;
    trim_at_ = busy ? now + kTrimAfter : std::optional<Clock::time_point>{};
    if (!busy) ::malloc_trim(0);
  }
  for (auto it = by_job_.begin(); it != by_job_.end();) {
    BcastRelays& rs = it->second;
    auto cit = rounds_.find(it->first);
    if (cit == rounds_.end() || cit->second.generation != rs.generation) {
      std::string why = cit == rounds_.end() ? "job '" + it->first + "' ended"
                                             : "generation " + std::to_string(rs.generation) +
                                                   " of job '" + it->first + "' was replaced";
      for (auto& [seq, r] : rs.by_seq) fail_cast(r, ErrorCode::kPeerExited, why, out);
      it = by_job_.erase(it);
      continue;
    }
    const CoordJob& cj = cit->second;
    for (auto& entry : rs.by_seq) {
      // Not a structured binding: clang 14 (the fuzz build) cannot capture one.
      const uint64_t seq = entry.first;
      auto& r = entry.second;
      if (r.finished || r.failed != ErrorCode::kOk) continue;
      auto name = [&] { return name_of(it->first, seq, r.root); };
      if (!cj.broken.empty()) {
        fail_cast(r, ErrorCode::kPeerExited,
                  "job '" + it->first + "' generation " + std::to_string(cj.generation) +
                      " cannot go on: " + cj.broken,
                  out);
        continue;
      }
      if (!cj.store.exited_ranks.empty()) {
        fail_cast(r, ErrorCode::kPeerExited,
                  name() + " cannot complete: rank " +
                      std::to_string(*cj.store.exited_ranks.begin()) + " has exited",
                  out);
        continue;
      }
      std::erase_if(r.pushes, [&](const BcastRelay::Parked& p) {
        if (p.deadline > now) return false;
        send_error_to(p.to, ErrorCode::kTimeout,
                      name() + ": no room for chunk " + std::to_string(p.index) +
                          " in time: the slowest node holds only " + std::to_string(r.low) +
                          " of " + std::to_string(r.chunks) + " chunk(s)",
                      out);
        return true;
      });
      std::erase_if(r.pulls, [&](const BcastRelay::Parked& p) {
        if (p.deadline > now) return false;
        send_error_to(p.to, ErrorCode::kTimeout,
                      name() + ": chunk " + std::to_string(p.index) +
                          " did not arrive in time (the root " + "pushed " +
                          std::to_string(r.pushed) + " of " + std::to_string(r.chunks) + ")",
                      out);
        return true;
      });
    }
    ++it;
  }
}

}  // namespace muster::daemon
