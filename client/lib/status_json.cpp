#include "json.hpp"
#include "muster/client.hpp"

namespace muster {

std::string to_json(const DaemonStatus& s) {
  using json::quote;
  std::string o = "{\"version\":" + quote(s.version) + ",\"pid\":" + std::to_string(s.pid) +
                  ",\"uptime_s\":" + std::to_string(s.uptime_s) +
                  ",\"peer_requests\":" + std::to_string(s.peer_requests) + ",\"devices\":[";
  for (size_t i = 0; i < s.devices.size(); ++i) {
    const auto& d = s.devices[i];
    // A GPU another user's job holds is in use with no job, rank or pid.
    bool leased = !d.job.empty();
    o += (i ? "," : "") + std::string("{\"index\":") + std::to_string(d.index) +
         ",\"name\":" + quote(d.name) + ",\"job\":" + (leased ? quote(d.job) : "null") +
         ",\"rank\":" + (leased ? std::to_string(d.rank) : "null") +
         ",\"pid\":" + (leased ? std::to_string(d.pid) : "null") +
         ",\"in_use\":" + (d.in_use || leased ? "true" : "false") + "}";
  }
  o += "],\"jobs\":[";
  for (size_t i = 0; i < s.jobs.size(); ++i) {
    const auto& j = s.jobs[i];
    o += (i ? "," : "") + std::string("{\"id\":") + quote(j.id) +
         ",\"uid\":" + (j.uid >= 0 ? std::to_string(j.uid) : "null") +
         ",\"generation\":" + std::to_string(j.generation) +
         ",\"world_size\":" + std::to_string(j.world_size) +
         ",\"local_world_size\":" + std::to_string(j.local_world_size) + ",\"ranks\":[";
    for (size_t k = 0; k < j.ranks.size(); ++k) {
      const auto& r = j.ranks[k];
      o += (k ? "," : "") + std::string("{\"rank\":") + std::to_string(r.rank) +
           ",\"local_rank\":" + std::to_string(r.local_rank) + ",\"pid\":" + std::to_string(r.pid) +
           ",\"device\":" + (r.device >= 0 ? std::to_string(r.device) : "null") +
           ",\"state\":" + quote(r.state) + "}";
    }
    o += "]}";
  }
  o += "]}";
  return o;
}

}  // namespace muster
