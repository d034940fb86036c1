// libmuster's launcher API, for programs that start a job's ranks (as
// `muster run` does): book a node's ranks and GPUs, hand them to the started
// workers, and form a multi-node world. Training processes do not need it.
// Errors are muster::Error exceptions.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "muster/client.hpp"

namespace muster {

// What reserve() booked.
struct Reservation {
  // The job's generation, as the daemon recorded it.
  uint64_t generation = 0;
  // The GPU of each local rank, by local rank; -1 = no GPU.
  std::vector<int> devices;
};

// Books all local ranks of a new job, and their GPUs, for launcher_pid.
// job: its id; root names another user's job as "id~UID" (muster run
// --owner), and speaks of it so in the calls that follow.
// allowed_devices: the GPUs the job may take (empty: any);
// generation: the job's generation (muster run's restart count), default 0.
Reservation reserve(Client& client, const std::string& job, uint32_t local_world_size,
                    bool wants_gpu, const std::vector<int>& allowed_devices, int64_t launcher_pid,
                    uint64_t generation = 0);

// Hands the reserved ranks to the started workers (pids by local rank).
// numa_binding: what the workers were pinned to (none, node, socket), for
// status; "" says nothing.
void attach(Client& client, const std::string& job, const std::vector<int64_t>& pids,
            const std::string& numa_binding = "");

// How rendezvous() forms a multi-node world.
struct RendezvousOptions {
  // host:port of the coordinating daemon's peer socket (required).
  std::string coordinator;
  // This node's place in the world when >= 0; default -1: in order of arrival.
  int node_rank = -1;
  // Nodes the world needs before it forms; default 1.
  uint32_t min_nodes = 1;
  // Nodes the world takes at most; default 1.
  uint32_t max_nodes = 1;
  // How long to wait for more nodes once min_nodes have come; default 30 s.
  std::chrono::milliseconds last_call{std::chrono::seconds(30)};
  // How long to wait for the world to form; default 900 s.
  std::chrono::milliseconds timeout{std::chrono::seconds(900)};
  // This node's address, the world's MASTER_ADDR if it becomes node 0;
  // default empty.
  std::string master_addr;
  // The world's MASTER_PORT if this node becomes node 0; default 0.
  int master_port = 0;
  // host:port of another node's musterd (its --peer-port) that passes this
  // node's join on to the coordinator with other nodes' joins, in one
  // message; default empty: straight to the coordinator. Should it not,
  // the node joins the coordinator itself.
  std::string via = {};
};

// The world a rendezvous formed.
struct World {
  uint64_t generation = 0;
  uint32_t node_rank = 0;
  uint32_t num_nodes = 1;
  uint32_t rank_offset = 0;  // global rank of this node's local rank 0
  uint32_t world_size = 1;
  std::string master_addr;
  int master_port = 0;
};

// After reserve(): joins the job's world through the coordinating daemon
// (torchrun's c10d rendezvous). Blocks until the world of a generation forms
// (or options.timeout passes).
World rendezvous(Client& client, const std::string& job, const RendezvousOptions& options);

// How a multi-node job's world is doing.
struct JobState {
  uint64_t generation = 0;
  // running, broken (a node was lost or restarted: restart the workers),
  // waiting (nodes wait to join the next generation) or forming.
  std::string state;
  std::string message;
  Forming forming{};  // while forming: who joined the round
};

JobState cluster_state(Client& client, const std::string& job);

}  // namespace muster
