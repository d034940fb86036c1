// The swarm of bench_swarm: one process speaks the peer protocol as many
// node daemons at once, each with its own connection to the coordinating
// daemon, each bringing what a node daemon of R ranks sends for a wire-up:
// node_join (answered with the world; in a tree, through its relay, as
// `muster run --join-via` sends it), its first heartbeat, one upstream
// get of the NCCL unique id for all its ranks (node 0 publishes it first,
// as its rank 0 would, with compare_set), one barrier_up with the count of
// its ranks, and at the end node_leave. Swarm nodes do not listen for
// peers, so the coordinator never makes them relays: in a tree they are
// leaves under real relay daemons (their World names the parent).
//
// A slice runs in a forked process (each connection takes two descriptors:
// a few processes hold 12,500 nodes under the descriptor limit). It
// connects and says hello (a heartbeat for no job, untimed, like
// TCPStore's constructor), reports ready, waits for the start, and reports
// absolute steady-clock times (shared by the processes of one machine).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace muster::bench {

struct SwarmSlice {
  std::string coordinator;  // tcp://host:port of the coordinating daemon
  std::string job;
  uint32_t first = 0, count = 0;  // node ranks [first, first + count)
  uint32_t nodes = 0;             // in the job
  uint32_t ranks_per_node = 8;
  int64_t owner_uid = 0;
  bool tree = false;  // expect a parent (a relay daemon) in each World
  // The relay daemons' peer endpoints (tcp://host:port), by node rank, and
  // the tree's width: a leaf joins through the relay the tree will make
  // its parent (--join-via), which batches its children's joins.
  std::vector<std::string> relays = {};
  uint32_t width = 0;
};

// Written by a slice's process to its result pipe (plain bytes).
struct SwarmReport {
  int64_t world_ns = 0;  // the last World of the slice arrived (steady clock)
  int64_t done_ns = 0;   // the last barrier answer of the slice arrived
  uint32_t slowest = 0;  // node rank whose barrier answer came last
  uint32_t failures = 0;
  char error[240] = {};  // the first failure
};

// Runs a slice: connects, writes one byte to ready_fd, reads one byte from
// start_fd, runs the wire-up, writes the SwarmReport to ready_fd, then
// waits for a second byte on start_fd before the teardown (node_leave).
// Returns the process's exit status.
int run_slice(const SwarmSlice& s, int start_fd, int ready_fd);

}  // namespace muster::bench
