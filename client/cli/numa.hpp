// `muster run --numa-binding none|node|socket`: each worker runs on the CPUs
// near its GPU, and prefers that GPU's NUMA node for its memory. The plan is
// worked out in the launcher before any worker is forked (reading /sys and
// the daemon's device list allocates); the forked child only applies the
// masks made here, with system calls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "muster/status.hpp"

namespace muster::cli {

// CPU numbers, sorted, without repeats.
using CpuList = std::vector<int>;

// A kernel cpulist ("0-23,48-71"); empty for "" or anything malformed.
CpuList parse_cpulist(const std::string& s);
// The same form back, ranges joined ("0-3,8").
std::string cpulist_text(const CpuList& cpus);

// "none", "node" or "socket"; throws std::runtime_error (exit 2) otherwise.
void check_numa_binding(const std::string& mode);

struct RankPin {
  CpuList cpus;       // empty: left as the launcher runs (not pinned)
  int64_t node = -1;  // the GPU's NUMA node: preferred for memory; -1 none
  std::string why;    // why a rank of a binding job is not pinned
};

struct NumaPlan {
  std::string mode;            // what is applied: none, node or socket
  std::vector<RankPin> ranks;  // by local rank
  // Why the plan is wider than asked, or some ranks are not pinned.
  std::vector<std::string> notes;
  // What status is told: the mode, or "none" when no rank is pinned (the
  // GPUs' CPUs unknown, or none the launcher may use).
  std::string applied() const;
};

// The binding for ranks on gpus (by local rank; nullptr: the rank has no
// GPU). asked: none, node, socket, or "" for the default (node when the job
// leased GPUs, else none). Never pins a rank to CPUs this process may not
// use, nor to none; a set shared by more ranks than it has CPUs widens the
// whole job (node, then socket, then none).
NumaPlan plan_numa_binding(const std::string& asked, const std::vector<const DeviceInfo*>& gpus);

// One line for people: "numa binding node: ranks 0-1 → CPUs 0-23 (node 0),
// …", ranks numbered from rank_offset, ranks with the same CPUs together.
std::string describe(const NumaPlan& plan, uint32_t rank_offset);

// Where each worker of a group runs: the plan for the GPUs it leased
// (`leased`, by local rank, -1 none), their CPUs as the daemon at endpoint
// lists them. Said on stderr at every start of the group (a restart may
// lease other GPUs), except for a CPU job left at the default, which has
// nothing to say.
NumaPlan numa_plan(const std::string& endpoint, const std::string& asked,
                   const std::vector<int>& leased, uint32_t rank_offset);

// A RankPin as the system calls take it, made before fork.
struct PinMasks {
  std::vector<unsigned long> cpus;   // sched_setaffinity's mask; empty: keep
  std::vector<unsigned long> nodes;  // set_mempolicy's node mask; empty: keep
};
PinMasks pin_masks(const RankPin& pin);

// In the forked child: async-signal-safe (system calls and write only). A
// failure is said on stderr and the worker runs unpinned; it never fails it.
void apply_pin(const PinMasks& masks);

}  // namespace muster::cli
