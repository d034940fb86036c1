// libmuster's view of a daemon's state: its GPUs, its jobs and their
// ranks, as Client::status() returns them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace muster {

struct DeviceInfo {
  uint32_t index = 0;
  std::string name;
  std::string job;  // empty when free, or when another user's job holds it
  int64_t rank = -1;
  int64_t pid = 0;
  bool in_use = false;  // leased, whoever holds it
  // From NVML (empty or -1 when the daemon does not know): the GPU's UUID,
  // PCI bus id and NUMA node; health "ok", "quarantined" (never leased) or
  // "foreign_use" (a process muster did not start runs there), with the
  // reason; or "drained" (see drain).
  std::string uuid{};
  std::string pci_bus_id{};
  int64_t numa_node = -1;
  std::string health = "ok";
  std::string reason{};
  // Drained by root (muster gpu drain): why; empty when not. Its holder
  // keeps it until its rank ends; nobody is given it after. Health then
  // says "drained" unless the GPU is also quarantined.
  std::string drain{};
  // The CPUs near it ("0-23,48-71"; empty when unknown), and the topology
  // by the other GPU's index: active NVLinks to it and the common PCIe
  // ancestor (NVML's levels: 0 the same board, 10 one switch, 20 several,
  // 30 a host bridge, 40 a NUMA node, 50 across sockets). Empty: unknown.
  std::string cpu_affinity{};
  std::vector<int64_t> nvlinks{};
  std::vector<int64_t> paths{};
  // The holder's owner (a uid; -1 when free or not shown): each user's job
  // names are their own, so two users' holders may share a name.
  // @since 0.3
  int64_t owner = -1;
};

struct RankState {
  uint32_t rank = 0;
  uint32_t local_rank = 0;
  int64_t pid = 0;
  int device = -1;
  std::string state;
  // The CPUs its process may run on ("0-23,48-71", what pinned it), as the
  // kernel told the daemon; empty without a process or from older daemons.
  std::string cpus{};
};

// A multi-node job's rendezvous round while it forms, as the job's
// coordinator last said: the nodes that joined (by their daemons'
// --node-name, sorted) and what closes the round. max_nodes == 0: no word
// of it (yet).
struct Forming {
  uint32_t nodes = 0;               // how many joined
  std::vector<std::string> joined;  // their names, sorted (the first 32)
  uint32_t min_nodes = 0;
  uint32_t max_nodes = 0;
  int64_t last_call_ms = 0;   // the job's last call
  int64_t closes_in_ms = -1;  // when the running last call ends; -1 = not running
};

// "3 of 4 nodes (node0, node1, node3), waiting for 1 more; forms at 4, or at
// 2 after the last call in 12 s"; "" when f says nothing.
std::string to_string(const Forming& f);

// A rank in an open wait's picture: rank -1 for one the daemon cannot
// name (a wait another node relayed), node -1 and pid 0 when unknown.
struct WaitRank {
  int64_t rank = -1;
  int64_t node = -1;
  int64_t pid = 0;
};

// A barrier that has not filled, or the ranks that wait for the same
// key(s) (the store's get and wait).
struct WaitInfo {
  std::string kind{};     // "barrier" or "key"
  std::string name{};     // the barrier's name, or the awaited key(s), ", "-joined
  uint64_t arrived = 0;   // barrier: ranks in; key: ranks waiting
  uint64_t expected = 0;  // barrier: the ranks it waits for in all; key: 0
  // barrier: the missing ranks; key: the waiting ones (the first 64)
  std::vector<WaitRank> ranks{};
  int64_t age_ms = 0;  // since the first arrival, or the oldest wait began
  bool stuck = false;  // older than the daemon's --stuck-after
};

// "barrier 'epoch-3': 7/8, waiting for rank 5 (node 2, pid 4242) for 41 s".
std::string to_string(const WaitInfo& w);

struct JobInfo {
  std::string id;
  uint64_t generation = 0;
  uint32_t world_size = 0;
  uint32_t local_world_size = 0;
  std::vector<RankState> ranks;
  int64_t uid = -1;   // the owner (-1 = none)
  Forming forming{};  // while its multi-node rendezvous forms
  // What muster run pinned the workers to (--numa-binding): none, node or
  // socket; empty when the launcher did not say (or none launched it).
  std::string numa_binding{};
  // Its open barriers and key waits, oldest first. For a job that spans
  // nodes, this node's ranks' only, unless job_wide: then the whole job's,
  // as its coordinator last heard from every node (Client::status(job)).
  std::vector<WaitInfo> waits{};
  bool job_wide = false;
  // The daemon bounds its reply: ranks and waits of this job it did not
  // list (0 = none left out).
  uint64_t ranks_left_out = 0;
  uint64_t waits_left_out = 0;
};

struct DaemonStatus {
  std::string version;
  int64_t pid = 0;
  double uptime_s = 0;
  std::vector<DeviceInfo> devices;
  std::vector<JobInfo> jobs;
  uint64_t peer_requests = 0;  // requests other daemons sent this one
  // How the daemon keeps each job's processes together: "cgroup DIR" (a
  // cgroup per job, killed at the job's end) or "guardian (WHY)" (only
  // muster run's guardian); empty from daemons older than this field.
  std::string containment{};
  // Where the daemon's GPUs come from: "nvml" (the only source that knows
  // the topology), "cuda", "simulated" or "none"; empty from older daemons.
  std::string gpu_source{};
  // Jobs the daemon did not list to keep its reply bounded (other users'
  // after the caller's own); ask for one with Client::status(job).
  uint64_t jobs_left_out = 0;
};

// The document `muster status --json` prints. Its "schema_version" is this
// number: fields are only added under one version; a field renamed,
// removed or changed in meaning raises it. @since 0.2
inline constexpr int kStatusJsonSchema = 1;
std::string to_json(const DaemonStatus& s);

}  // namespace muster
