// The launcher API (muster/launcher.hpp): booking a node's ranks, handing
// them to workers, and the multi-node rendezvous and job state.
#include "muster/launcher.hpp"

#include "forming.hpp"
#include "host_address.hpp"
#include "job_id.hpp"
#include "protocol/cluster_messages.hpp"
#include "session.hpp"

namespace muster {

Reservation reserve(Client& client, const std::string& job, uint32_t local_world_size,
                    bool wants_gpu, const std::vector<int>& allowed_devices, int64_t launcher_pid,
                    uint64_t generation) {
  proto::Reserve m{job, local_world_size, wants_gpu, {}, launcher_pid, generation};
  // A key ("name~uid", root reaching another user's job): the reserve names
  // the job and says its owner apart (daemon/core/namespaces.cpp).
  if (job.find('~') != std::string::npos) {
    m.job = std::string(job_name(job));
    m.owner = job_key_owner(job);
  }
  for (int d : allowed_devices) m.devices.push_back(d);
  auto r = detail::session_of(client).call<proto::Reserved>(m);
  return {r.generation, std::vector<int>(r.devices.begin(), r.devices.end())};
}

void attach(Client& client, const std::string& job, const std::vector<int64_t>& pids,
            const std::string& numa_binding) {
  detail::session_of(client).call<proto::Ok>(proto::Attach{job, pids, numa_binding});
}

World rendezvous(Client& client, const std::string& job, const RendezvousOptions& o) {
  // Host names are looked up here, as the user: the daemon takes addresses
  // only (host_address.hpp).
  proto::Rendezvous m{job,
                      resolve_host_port(o.coordinator),
                      o.node_rank,
                      o.min_nodes,
                      o.max_nodes,
                      o.last_call.count(),
                      o.timeout.count(),
                      o.master_addr,
                      o.master_port,
                      o.via.empty() ? o.via : resolve_host_port(o.via)};
  // The daemon answers when the world forms or the timeout passes there.
  auto w = detail::session_of(client).call<proto::World>(m, o.timeout + std::chrono::seconds(5));
  return {w.generation,
          w.node_rank,
          w.num_nodes,
          w.rank_offset,
          w.world_size,
          w.master_addr,
          static_cast<int>(w.master_port)};
}

JobState cluster_state(Client& client, const std::string& job) {
  auto r = detail::session_of(client).call<proto::ClusterStateReply>(proto::ClusterState{job});
  return {r.event.generation, r.event.state, r.event.message, detail::from_wire(r.event.forming)};
}

}  // namespace muster
