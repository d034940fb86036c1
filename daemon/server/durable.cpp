// The end of each loop round: what changed is saved before any reply that
// acknowledges it leaves (persist/state_file.hpp).
#include <vector>

#include "cluster/multi_node.hpp"
#include "protocol/envelope.hpp"
#include "protocol/messages.hpp"
#include "server/runtime.hpp"

namespace muster::daemon {

namespace {

bool refusal(const Outgoing& o) {
  if (!o.link.empty()) return false;
  try {
    return proto::decode_envelope(o.frame.data(), o.frame.size(), true).type ==
           static_cast<uint16_t>(proto::MsgType::kErrorReply);
  } catch (const proto::EnvelopeError&) {
    return false;
  }
}

}  // namespace

void Server::Runtime::save_then_deliver() {
  state->loop_back(out);
  bool acks = replies.complete(out);
  if (acks) dirty = true;
  // A coordinated round changed without a reply that says so (it broke, a
  // broadcast started): saved all the same, before the round's replies.
  if (state->cluster().take_save_wanted()) dirty = true;
  // A client never acts on an answer that a restarted daemon would not
  // know. When the save fails, replies that acknowledge a change wait for
  // one that works (retried every 100 ms: Server::watch_deadlines); a round
  // that acknowledged nothing (a process exit, reads) is answered, so reads
  // keep working.
  if (dirty || state_file->retrying()) {
    auto t0 = env->now();
    bool ok = state_file->save(*state, replies);
    observe.saved(ok, env->now() - t0, state_file->failure());
    if (ok) {
      dirty = false;
      holding = false;
    } else if (acks) {
      holding = true;
    }
  }
  if (!holding) return deliver();
  // Refusals (storage_failed among them) acknowledge nothing: they go out;
  // everything else waits for a save that works.
  std::vector<Outgoing> now, held;
  for (auto& o : out) (refusal(o) ? now : held).push_back(std::move(o));
  out = std::move(now);
  deliver();
  out = std::move(held);
}

}  // namespace muster::daemon
