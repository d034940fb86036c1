// The multi-node side of a daemon (multi_node.hpp).
#include "cluster/multi_node.hpp"

#include <map>

#include "core/out_answers.hpp"

namespace muster::daemon {

MultiNode::MultiNode(Store& store, JobTable& jobs, StatusOf status)
    : node(jobs), coordinator(store), status_(std::move(status)) {
  node.set_here([this, &jobs](const std::string& link, const std::string& id) {
    const Job* job = jobs.find(id);
    return job && job->cluster && job->cluster->coordinator == link &&
           coordinator.has_node(id, job->generation, node.node_id());
  });
}

void MultiNode::configure(std::string node_id, std::chrono::milliseconds peer_timeout,
                          std::string unavailable, uint32_t tree_width) {
  node.configure(std::move(node_id), peer_timeout, std::move(unavailable));
  coordinator.configure(peer_timeout, tree_width);
}

void MultiNode::on_link_frame(const std::string& link, void* data, size_t size,
                              std::vector<Outgoing>& out, std::shared_ptr<void> held) {
  node.on_link_frame(link, data, size, out, std::move(held));
  answer_job_waits(out);
}

void MultiNode::tick(Clock::time_point now, std::vector<Outgoing>& out) {
  coordinator.tick(now, out);
  node.tick(now, out);
  stuck_detected_ += node.relays().report_stuck(now);
  answer_job_waits(out);
}

WaitCounts MultiNode::relayed_counts(Clock::time_point now) const {
  auto c = node.relays().wait_counts(now);
  c.stuck_detected = stuck_detected_;
  return c;
}

void MultiNode::answer_job_waits(std::vector<Outgoing>& out) {
  for (auto& a : node.take_job_waits()) {
    try {
      auto s = status_(a.to.peer_uid, a.job);
      if (a.waits && !s.jobs.empty()) {
        s.jobs[0].waits = std::move(*a.waits);
        s.jobs[0].job_wide = true;
      }
      send_reply(out, a.to, s);
    } catch (const Error& e) {  // the job ended meanwhile
      send_error(out, a.to, e.code(), e.what());
    }
  }
}

// Each node once, however many jobs it shares: its freshest word.
void MultiNode::metrics(metrics::Sample& s, Clock::time_point now) const {
  auto age = [now](Clock::time_point t) { return std::chrono::duration<double>(now - t).count(); };
  for (const auto& [link, l] : node.links())
    s.peers.push_back({link, "coordinator", age(l.last_heard), l.lost});
  std::map<std::string, Clock::time_point> nodes;
  for (const auto& [id, cj] : coordinator.rounds())
    for (const auto* list : {&cj.nodes, &cj.waiting})
      for (const auto& n : *list) {
        if (n.left) continue;
        auto [it, fresh] = nodes.emplace(n.node_id, n.last_seen);
        if (!fresh && n.last_seen > it->second) it->second = n.last_seen;
      }
  for (const auto& [node_id, seen] : nodes) s.peers.push_back({node_id, "node", age(seen), false});
}

}  // namespace muster::daemon
