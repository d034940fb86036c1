// The parts of a status reply (messages.hpp StatusReply): each GPU, each
// job with its ranks and a forming round (doc/protocol.md, status_reply).
// Walked by status_messages.cpp; JobEvent carries Forming inline too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "protocol/codec.hpp"
#include "protocol/wait_messages.hpp"

namespace muster::proto {

struct DeviceStatus {
  uint32_t index = 0;
  std::string name;
  std::string job;  // the holder's name; empty when free
  int64_t rank = -1;
  int64_t pid = 0;
  // Leased. A device leased to a job the caller may not see is in_use with
  // no job, rank or pid (status privacy: doc/protocol.md, "Who may do what").
  bool in_use = false;
  // From NVML, optional on the wire (older daemons, other sources): empty
  // or -1 when unknown.
  std::string uuid{};
  std::string pci_bus_id{};
  int64_t numa_node = -1;
  std::string cpu_affinity{};  // the CPUs near it, "0-23,48-71"
  // Topology, by the other GPU's index: active NVLinks to it, and the
  // common PCIe ancestor (NVML's nvmlGpuTopologyLevel_t values: 0 the same
  // board … 50 across sockets). Empty when unknown.
  std::vector<int64_t> nvlinks{};
  std::vector<int64_t> paths{};
  // "ok", "quarantined" (never leased) with the reason: ECC errors, a
  // critical XID, lost, MIG mode; "drained" (see drain); or "foreign_use"
  // with the foreign pid.
  std::string health = "ok";
  std::string reason{};
  // Drained by root (muster gpu drain): why; empty when not drained. A
  // drained GPU's health is "drained" unless it is also quarantined.
  std::string drain{};
  int64_t owner = -1;  // the holder's uid (-1: free, none or not shown)
  template <class IO>
  void fields(IO& io);
  bool operator==(const DeviceStatus&) const = default;
};

// The longest cpulist a rank's status carries; a daemon sends none longer.
inline constexpr size_t kMaxCpusText = 4096;
struct RankStatus {
  uint32_t rank = 0;
  uint32_t local_rank = 0;
  int64_t pid = 0;
  int64_t device = -1;
  std::string state;  // reserved | running | joined | exited
  // The CPUs the rank's process may run on, as the kernel says
  // (Cpus_allowed_list, "0-23,48-71"), whatever pinned it; empty when it
  // has no process (yet), or from older daemons.
  std::string cpus{};
  template <class IO>
  void fields(IO& io);
  bool operator==(const RankStatus&) const = default;
};

// A multi-node job's rendezvous round while it forms, as its coordinator
// last said (optional on the wire: written only while a round forms, so
// max_nodes == 0 means "no word of a forming round").
inline constexpr size_t kMaxFormingNames = 32;
struct Forming {
  uint32_t nodes = 0;               // how many nodes joined the round
  std::vector<std::string> joined;  // their names, sorted, the first kMaxFormingNames
  uint32_t min_nodes = 0;
  uint32_t max_nodes = 0;
  int64_t last_call_ms = 0;             // the job's last call (--last-call)
  std::optional<int64_t> closes_in_ms;  // until the running last call ends, once it runs
  // Walked inline by the messages that carry it (JobEvent, JobStatus).
  template <class IO>
  void fields(IO& io);
  bool operator==(const Forming&) const = default;
};

struct JobStatus {
  std::string id;
  uint64_t generation = 0;
  uint32_t world_size = 0;
  uint32_t local_world_size = 0;
  std::vector<RankStatus> ranks;
  int64_t uid = -1;                 // the owner; -1 = none (made by an in-process caller)
  Forming forming{};                // a multi-node job still in its rendezvous
  std::string numa_binding{};       // as its launcher's attach said; "" unknown
  std::vector<WaitStatus> waits{};  // open barriers and key waits (optional on the wire)
  bool job_wide = false;            // waits: the whole job's, from its coordinator (optional)
  // What the reply left out of this job to stay within its bound: ranks
  // past those listed, waits past those listed (optional on the wire).
  uint64_t ranks_left_out = 0;
  uint64_t waits_left_out = 0;
  template <class IO>
  void fields(IO& io);
  bool operator==(const JobStatus&) const = default;
};

}  // namespace muster::proto
