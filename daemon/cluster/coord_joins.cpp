// Joins that come through relays (doc/protocol.md, "Many nodes"): a relay
// batches its children's NodeJoins into one NodeJoins, and the coordinator
// answers the Worlds of one relay's children in one Replies. So a round of
// thousands of nodes costs the coordinator O(relays) messages each way,
// not one per node.
#include "cluster/coordinator.hpp"
#include "log.hpp"
#include "protocol/envelope.hpp"

namespace muster::daemon {

using proto::MsgType;

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
