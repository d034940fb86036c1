#include <unistd.h>

#include "core/state.hpp"
#include "muster_config.h"

namespace muster::daemon {

proto::StatusReply State::status(int64_t viewer) const {
  proto::StatusReply s;
  s.version = MUSTER_VERSION;
  s.pid = ::getpid();
  s.uptime_s = std::chrono::duration<double>(Clock::now() - started_).count();
  s.peer_requests = peer_requests_;
  s.containment = containment_;
  s.gpu_source = gpu_source_;
  for (const auto& d : jobs_.devices().slots()) {
    proto::DeviceStatus ds{d.device.index, d.device.name, "", -1, 0, !d.job.empty()};
    ds.uuid = d.device.uuid;
    ds.pci_bus_id = d.device.pci_bus_id;
    ds.numa_node = d.device.numa_node;
    ds.cpu_affinity = d.device.cpu_affinity;
    ds.nvlinks.assign(d.device.nvlinks.begin(), d.device.nvlinks.end());
    ds.paths.assign(d.device.paths.begin(), d.device.paths.end());
    ds.drain = d.drain;
    if (!d.quarantined().empty()) {
      ds.health = "quarantined";
      ds.reason = d.quarantined();
    } else if (!d.drain.empty()) {
      ds.health = "drained";
      ds.reason = "drained: " + d.drain;
    } else if (auto f = d.job.empty() ? jobs_.foreign_user(d.device.index) : ""; !f.empty()) {
      ds.health = "foreign_use";
      ds.reason =
          "runs " + f + (jobs_.refuses_foreign() ? ": not leased" : ": leased anyway (warn)");
    }
    // Another uid's GPU is only "in use": who holds it is theirs to know.
    if (const auto& job = d.job; !job.empty() && jobs_.all().at(job).visible_to(viewer)) {
      const auto& slot = jobs_.all().at(job).slots.at(d.local_rank);
      ds.job = job;
      ds.rank = d.local_rank;
      ds.pid = slot.pid;
    }
    s.devices.push_back(std::move(ds));
  }
  for (const auto& [id, job] : jobs_) {
    if (!job.visible_to(viewer)) continue;
    proto::JobStatus js{id, job.generation, job.world_size(), job.local_world_size,
                        {}, job.owner_uid};
    for (uint32_t i = 0; i < job.local_world_size; ++i) {
      const auto& slot = job.slots[i];
      uint32_t rank = job.cluster ? job.cluster->rank_offset + i : i;
      js.ranks.push_back({rank, i, slot.pid, slot.device, slot_state_name(slot.state)});
    }
    // A rendezvous still forming: who joined, as the coordinator last said.
    if (job.cluster && !job.cluster->formed) js.forming = cluster_state(id).forming;
    s.jobs.push_back(std::move(js));
  }
  return s;
}

std::string State::summary() const {
  auto st = status();
  size_t leased = 0, ranks = 0;
  for (const auto& d : st.devices)
    if (!d.job.empty()) ++leased;
  for (const auto& j : st.jobs)
    for (const auto& r : j.ranks)
      if (r.state == "reserved" || r.state == "running" || r.state == "joined") ++ranks;
  return std::to_string(st.jobs.size()) + " job(s), " + std::to_string(leased) + " of " +
         std::to_string(st.devices.size()) + " GPU(s) leased, " + std::to_string(ranks) +
         " rank(s)";
}

}  // namespace muster::daemon
