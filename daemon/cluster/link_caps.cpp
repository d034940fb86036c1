// The coordinators (links) a rendezvous names: well formed, and within the
// caps on how many a node's jobs may name (issue 43).
#include <set>
#include <string>
#include <vector>

#include "cluster/node_links.hpp"
#include "host_address.hpp"

namespace muster::daemon {

// Each name a rendezvous gives is a link (a connection and three ZeroMQ
// sockets) until its job ends: one user naming a new host:port per job
// must not take the sockets every other job needs (libzmq's limit once
// ended the daemon).
void NodeLinks::check_links(const Job& job, const proto::Rendezvous& m) const {
  for (const auto& [what, endpoint] : {std::pair{"coordinator", &m.coordinator}, {"via", &m.via}})
    if ((endpoint != &m.via || !m.via.empty()) && !numeric_host_port(*endpoint))
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(what) + " '" + *endpoint +
                      "' is not ADDRESS:PORT (an IPv4 address or a bracketed IPv6 one, a port "
                      "1..65535): musterd looks up no host names, which would hold everyone's "
                      "requests; muster run looks them up before it asks");
  const std::vector<std::string> want{m.coordinator, m.via};
  std::set<std::string> mine;
  for (const auto& [id, other] : jobs_)
    if (other.cluster && other.owner_uid == job.owner_uid && id != job.id) {
      mine.insert(other.cluster->coordinator);
      if (!other.cluster->via.empty()) mine.insert(other.cluster->via);
    }
  size_t fresh = 0;
  for (const auto& w : want) {
    if (w.empty() || mine.count(w)) continue;  // no via, or a link already counted
    mine.insert(w);
    if (!links_.count(w)) ++fresh;
  }
  if (links_per_uid_ && mine.size() > links_per_uid_)
    throw Error(ErrorCode::kQuotaExceeded,
                "uid " + std::to_string(job.owner_uid) + "'s jobs on this node would name " +
                    std::to_string(mine.size()) + " coordinators and relays, over the " +
                    std::to_string(links_per_uid_) +
                    " one user may (each is a connection kept until its job ends)");
  if (links_total_ && links_.size() + fresh > links_total_)
    throw Error(ErrorCode::kQuotaExceeded,
                "this node keeps " + std::to_string(links_.size()) +
                    " links to coordinators, the most its file descriptors allow (" +
                    std::to_string(links_total_) + "); try again when jobs have ended");
}

}  // namespace muster::daemon
