#include <cmath>

#include "json.hpp"
#include "muster/client.hpp"

namespace muster {

namespace {

using json::Object;

// A GPU another user's job holds is in use with no job, rank or pid.
Object device_json(const DeviceInfo& d) {
  bool leased = !d.job.empty();
  Object o;
  o["index"] = d.index;
  o["name"] = d.name;
  o["job"] = leased ? Object(d.job) : Object(nullptr);
  o["owner"] = leased && d.owner >= 0 ? Object(d.owner) : Object(nullptr);
  o["rank"] = leased ? Object(d.rank) : Object(nullptr);
  o["pid"] = leased ? Object(d.pid) : Object(nullptr);
  o["in_use"] = d.in_use || leased;
  o["uuid"] = d.uuid.empty() ? Object(nullptr) : Object(d.uuid);
  o["pci_bus_id"] = d.pci_bus_id.empty() ? Object(nullptr) : Object(d.pci_bus_id);
  o["numa_node"] = d.numa_node >= 0 ? Object(d.numa_node) : Object(nullptr);
  o["health"] = d.health;
  o["reason"] = d.reason.empty() ? Object(nullptr) : Object(d.reason);
  o["drain"] = d.drain.empty() ? Object(nullptr) : Object(d.drain);
  // The topology, by the other GPU's index (null: the daemon cannot say).
  o["cpu_affinity"] = d.cpu_affinity.empty() ? Object(nullptr) : Object(d.cpu_affinity);
  o["nvlinks"] = d.nvlinks.empty() ? Object(nullptr) : Object(d.nvlinks);
  o["paths"] = d.paths.empty() ? Object(nullptr) : Object(d.paths);
  return o;
}

// A forming rendezvous: who joined and what closes it; null otherwise.
Object forming_json(const Forming& f) {
  if (f.max_nodes == 0) return Object(nullptr);
  Object o;
  o["nodes"] = f.nodes;
  o["joined"] = Object::array();
  for (const auto& name : f.joined) o["joined"].push_back(name);
  o["min_nodes"] = f.min_nodes;
  o["max_nodes"] = f.max_nodes;
  o["last_call_s"] = static_cast<double>(f.last_call_ms) / 1000.0;
  o["closes_in_s"] =
      f.closes_in_ms >= 0 ? Object(static_cast<double>(f.closes_in_ms) / 1000.0) : Object(nullptr);
  o["progress"] = to_string(f);
  return o;
}

// An open barrier or key wait; its ranks with null for what is unknown.
Object wait_json(const WaitInfo& w) {
  Object o;
  o["kind"] = w.kind;
  o["name"] = w.name;
  o["arrived"] = w.arrived;
  o["expected"] = w.kind == "barrier" ? Object(w.expected) : Object(nullptr);
  o["age_s"] = static_cast<double>(w.age_ms) / 1000.0;
  o["stuck"] = w.stuck;
  o[w.kind == "barrier" ? "missing" : "waiting"] = Object::array();
  for (const auto& r : w.ranks) {
    Object rank;
    rank["rank"] = r.rank >= 0 ? Object(r.rank) : Object(nullptr);
    rank["node"] = r.node >= 0 ? Object(r.node) : Object(nullptr);
    rank["pid"] = r.pid > 0 ? Object(r.pid) : Object(nullptr);
    o[w.kind == "barrier" ? "missing" : "waiting"].push_back(std::move(rank));
  }
  o["text"] = to_string(w);
  return o;
}

Object job_json(const JobInfo& j) {
  Object o;
  o["id"] = j.id;
  // A job is its owner's: its name alone does not say which job (issue #42).
  o["owner"] = j.uid >= 0 ? Object(j.uid) : Object(nullptr);
  o["uid"] = j.uid >= 0 ? Object(j.uid) : Object(nullptr);
  o["generation"] = j.generation;
  o["world_size"] = j.world_size;
  o["local_world_size"] = j.local_world_size;
  o["rendezvous"] = forming_json(j.forming);
  o["numa_binding"] = j.numa_binding.empty() ? Object(nullptr) : Object(j.numa_binding);
  o["ranks"] = Object::array();
  for (const auto& r : j.ranks) {
    Object rank;
    rank["rank"] = r.rank;
    rank["local_rank"] = r.local_rank;
    rank["pid"] = r.pid;
    rank["device"] = r.device >= 0 ? Object(r.device) : Object(nullptr);
    rank["state"] = r.state;
    rank["cpus"] = r.cpus.empty() ? Object(nullptr) : Object(r.cpus);
    o["ranks"].push_back(std::move(rank));
  }
  o["waits"] = Object::array();
  for (const auto& w : j.waits) o["waits"].push_back(wait_json(w));
  o["waits_job_wide"] = j.job_wide;
  o["ranks_left_out"] = j.ranks_left_out;
  o["waits_left_out"] = j.waits_left_out;
  return o;
}

}  // namespace

std::string to_json(const DaemonStatus& s) {
  Object o;
  // The document's shape: fields are only added under one schema version;
  // one renamed, removed or changed in meaning raises it.
  o["schema_version"] = kStatusJsonSchema;
  o["version"] = s.version;
  o["pid"] = s.pid;
  // Microseconds, the precision the status has always shown.
  o["uptime_s"] = std::round(s.uptime_s * 1e6) / 1e6;
  o["peer_requests"] = s.peer_requests;
  o["containment"] = s.containment;
  o["gpu_source"] = s.gpu_source.empty() ? Object(nullptr) : Object(s.gpu_source);
  o["devices"] = Object::array();
  for (const auto& d : s.devices) o["devices"].push_back(device_json(d));
  o["jobs"] = Object::array();
  for (const auto& j : s.jobs) o["jobs"].push_back(job_json(j));
  o["jobs_left_out"] = s.jobs_left_out;
  return json::dump(o);
}

}  // namespace muster
