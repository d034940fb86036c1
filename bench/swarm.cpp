// A slice of the swarm (swarm.hpp): many node daemons' peer traffic from
// one process, one DEALER connection per node.
#include "swarm.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <vector>
#include <zmq.hpp>

#include "muster/error.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"

namespace muster::bench {

namespace {

using proto::MsgType;

// Request ids of a node's messages (each node has its own connection).
enum Id : uint64_t { kHello = 1, kJoin, kBeat, kPublish, kGet, kBarrier, kLeave };

constexpr int64_t kWaitMs = 120000;
constexpr int kResendMs = 2000;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class SwarmNode {
 public:
  SwarmNode(zmq::context_t& ctx, const SwarmSlice& s, uint32_t rank)
      : ctx_(ctx),
        sock_(ctx, zmq::socket_type::dealer),
        rank_(rank),
        id_("swarm-" + std::to_string(rank)) {
    setup(sock_, "S" + std::to_string(rank));
    sock_.connect(s.coordinator);
  }
  // Barriers and key waits go to the parent the World named, as a node
  // daemon's do (a connection of their own, made when the World came, or
  // the one its join went through when that is the parent).
  void parent(const std::string& endpoint) {
    if (endpoint == up_endpoint_) return;
    up_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::dealer);
    setup(*up_, "U" + std::to_string(rank_));
    up_->connect("tcp://" + endpoint);
    up_endpoint_ = endpoint;
  }
  bool relayed() const { return up_ != nullptr; }
  // keep: an answer is awaited, and the request goes again until it comes.
  template <class M>
  void send(uint64_t id, const M& m, bool keep = true) {
    std::string f = proto::encode(id, m);
    sock_.send(zmq::buffer(f), zmq::send_flags::none);
    if (keep) sent_[id] = std::move(f);
  }
  // Every request still unanswered goes again (the slice's nodes are
  // independent daemons: each would resend its own, not only the one this
  // thread happens to wait for).
  void resend() {
    for (const auto& [id, f] : sent_) sock_.send(zmq::buffer(f), zmq::send_flags::dontwait);
    for (const auto& [id, f] : sent_up_)
      (up_ ? *up_ : sock_).send(zmq::buffer(f), zmq::send_flags::dontwait);
  }
  std::vector<std::unique_ptr<SwarmNode>>* slice = nullptr;  // for resend()
  template <class M>
  void send_up(uint64_t id, const M& m, bool keep = true) {
    std::string f = proto::encode(id, m);
    (up_ ? *up_ : sock_).send(zmq::buffer(f), zmq::send_flags::none);
    if (keep) sent_up_[id] = std::move(f);
  }
  // The answer to request `id` (answers to others, a heartbeat's, are
  // dropped on the way); an error reply is thrown.
  proto::Envelope await(uint64_t id, MsgType want) { return await_on(sock_, sent_, id, want); }
  // The same upstream. A relay that has not had its own World yet holds
  // the request until it has (daemon/cluster/relays.cpp).
  proto::Envelope await_up(uint64_t id, MsgType want) {
    return await_on(up_ ? *up_ : sock_, sent_up_, id, want);
  }
  const std::string& node_id() const { return id_; }
  uint32_t rank() const { return rank_; }
  uint64_t generation = 0;

 private:
  struct Refused : std::runtime_error {
    Refused(uint16_t c, const std::string& m) : std::runtime_error(m), code(c) {}
    uint16_t code;
  };
  // As a node daemon's links: a routing id of its own, kept across
  // reconnects, so that a request sent again is answered once (the
  // daemons' reply caches), and a request unanswered for a while is sent
  // again: a connection the daemon closed (plain TCP that sent nothing
  // within 5 s, when this machine is too busy to send it sooner) took it.
  static void setup(zmq::socket_t& sock, const std::string& routing_id) {
    sock.set(zmq::sockopt::linger, 0);
    sock.set(zmq::sockopt::routing_id, zmq::buffer(routing_id));
    sock.set(zmq::sockopt::rcvtimeo, kResendMs);
  }
  proto::Envelope await_on(zmq::socket_t& sock, std::map<uint64_t, std::string>& sent, uint64_t id,
                           MsgType want) {
    for (int waited = 0;;) {
      zmq::message_t msg;
      if (!sock.recv(msg)) {
        if ((waited += kResendMs) > kWaitMs) throw std::runtime_error(id_ + ": no answer");
        for (auto& n : *slice) n->resend();
        continue;
      }
      auto env = proto::decode_envelope(msg.data(), msg.size());
      if (env.request_id != id) continue;
      sent.erase(id);
      if (env.type == static_cast<uint16_t>(MsgType::kErrorReply)) {
        auto e = proto::ErrorReply::unpack(env.payload);
        throw Refused(e.code, id_ + ": error " + std::to_string(e.code) + ": " + e.message);
      }
      if (env.type != static_cast<uint16_t>(want))
        throw std::runtime_error(id_ + ": answer of type " + std::to_string(env.type) +
                                 " to request " + std::to_string(id));
      return env;
    }
  }

  zmq::context_t& ctx_;
  zmq::socket_t sock_;
  std::unique_ptr<zmq::socket_t> up_;
  std::string up_endpoint_;                         // host:port up_ is connected to
  std::map<uint64_t, std::string> sent_, sent_up_;  // by request id, to send again
  uint32_t rank_;
  std::string id_;
};

// As nccl_ids.cpp names generation 0's one id of communicator "world".
const std::string kNcclKey = "muster.nccl/0/world/1/0";

// relay: for a relay daemon (the node's parent), not the coordinator.
template <class Inner>
proto::Forward forward(const SwarmSlice& s, uint64_t generation, const Inner& m,
                       bool relay = false) {
  return proto::Forward{s.job, generation, proto::encode(0, m), relay};
}

// The wire-up proper: every node joins, then each node's ranks get the
// NCCL id and pass a barrier. Fills r; throws on the first failure.
void wire_up(const SwarmSlice& s, std::vector<std::unique_ptr<SwarmNode>>& nodes, SwarmReport& r) {
  const auto uid = s.owner_uid;
  std::vector<proto::NodeJoin> joins;
  for (auto& n : nodes) {
    proto::NodeJoin& j = joins.emplace_back();
    j.job = s.job;
    j.node_id = n->node_id();
    j.nproc = s.ranks_per_node;
    j.node_rank = n->rank();
    j.min_nodes = j.max_nodes = s.nodes;
    j.timeout_ms = kWaitMs;
    j.master_addr = "127.0.0.1";
    j.master_port = 29500;
    j.owner_uid = uid;
    j.relay = n->relayed();  // through the relay it said hello to
    n->send_up(kJoin, j);
  }
  const uint32_t world = s.nodes * s.ranks_per_node;
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto& n = nodes[i];
    proto::Envelope got;
    try {
      got = n->await_up(kJoin, MsgType::kWorld);
    } catch (const std::runtime_error& e) {
      if (!joins[i].relay) throw;
      // The relay could not pass it on (daemon/cluster/joins.cpp): to the
      // coordinator itself, as a node daemon's join goes then.
      std::fprintf(stderr, "bench_swarm: %s: joins the coordinator directly\n", e.what());
      joins[i].relay = false;
      n->send(kJoin, joins[i]);
      got = n->await(kJoin, MsgType::kWorld);
    }
    auto w = proto::World::unpack(got.payload);
    if (w.node_rank != n->rank() || w.world_size != world ||
        w.rank_offset != n->rank() * s.ranks_per_node || (!s.tree && !w.parent.empty()))
      throw std::runtime_error(n->node_id() + ": a wrong world (node " +
                               std::to_string(w.node_rank) + ", " + std::to_string(w.world_size) +
                               " ranks, parent '" + w.parent + "')");
    n->generation = w.generation;
    if (!w.parent.empty()) n->parent(w.parent);
    // A node's first heartbeat follows its world (daemon/cluster/beats.cpp):
    // to its parent in the tree, which carries it up in its own.
    proto::Heartbeat beat{n->node_id(), {proto::JobGeneration{s.job, w.generation}}, n->relayed()};
    if (n->relayed())
      n->send_up(kBeat, beat, false);
    else
      n->send(kBeat, beat, false);
    if (n->rank() == 0)
      n->send(
          kPublish,
          forward(s, w.generation,
                  proto::StoreCompareSet{s.job, kNcclKey, "", std::string(128, 'i'), std::nullopt}),
          false);
    n->send_up(kGet,
               forward(s, w.generation, proto::StoreGet{s.job, kNcclKey, kWaitMs, std::nullopt},
                       n->relayed()));
  }
  r.world_ns = now_ns();
  std::string id;
  for (auto& n : nodes) {
    // The swarm's node 0 publishes 'i' x 128 in the star; in the tree a
    // relay node's rank 0 publishes a real one: the same for every node.
    auto v = proto::Value::unpack(n->await_up(kGet, MsgType::kValue).payload);
    if (id.empty()) id = v.value;
    if (v.value.size() != 128 || v.value != id)
      throw std::runtime_error(n->node_id() + ": another NCCL id (" +
                               std::to_string(v.value.size()) + " bytes)");
    n->send_up(kBarrier, proto::BarrierUp{s.job, n->generation, "wired", s.ranks_per_node, kWaitMs,
                                          n->relayed()});
  }
  for (auto& n : nodes) {
    n->await_up(kBarrier, MsgType::kOk);
    r.done_ns = now_ns();
    r.slowest = n->rank();
  }
}

}  // namespace

int run_slice(const SwarmSlice& s, int start_fd, int ready_fd) {
  SwarmReport r;
  zmq::context_t ctx(1);
  ctx.set(zmq::ctxopt::max_sockets, 2 * static_cast<int>(s.count) + 64);  // and parents
  std::vector<std::unique_ptr<SwarmNode>> nodes;
  auto fail = [&](const std::exception& e) {
    if (!r.failures++) std::snprintf(r.error, sizeof r.error, "%s", e.what());
  };
  try {
    for (uint32_t i = 0; i < s.count; ++i)
      nodes.push_back(std::make_unique<SwarmNode>(ctx, s, s.first + i));
    for (auto& n : nodes) n->slice = &nodes;
    // Connected and admitted before the clock starts.
    for (auto& n : nodes) n->send(kHello, proto::Heartbeat{n->node_id(), {}});
    for (auto& n : nodes) n->await(kHello, MsgType::kHeartbeatAck);
    // In the tree, the relay that will be its parent (the relays hold node
    // ranks 0..R-1 and the first positions: node n >= width has position
    // n / width - 1 for parent; those below width are the coordinator's
    // children), which takes its join.
    for (auto& n : nodes)
      if (!s.relays.empty() && n->rank() >= s.width) {
        n->parent(s.relays.at(n->rank() / s.width - 1));
        n->send_up(kHello, proto::Heartbeat{n->node_id(), {}, true});
      }
    for (auto& n : nodes)
      if (n->relayed()) n->await_up(kHello, MsgType::kHeartbeatAck);
  } catch (const std::exception& e) {
    fail(e);
  }
  char b = 'r';
  if (write(ready_fd, &b, 1) != 1 || read(start_fd, &b, 1) != 1) return 2;
  if (!r.failures) {
    try {
      wire_up(s, nodes, r);
    } catch (const std::exception& e) {
      fail(e);
    }
  }
  if (write(ready_fd, &r, sizeof r) != static_cast<ssize_t>(sizeof r)) return 2;
  if (read(start_fd, &b, 1) != 1) return 2;
  try {
    // In the tree, to the parent, which passes the leaves on in batches.
    for (auto& n : nodes)
      n->send_up(kLeave, proto::NodeLeave{s.job, n->generation, n->node_id(), {}, n->relayed()});
    for (auto& n : nodes) n->await_up(kLeave, MsgType::kOk);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_swarm: teardown: %s\n", e.what());
    return 1;
  }
  return r.failures ? 1 : 0;
}

}  // namespace muster::bench
