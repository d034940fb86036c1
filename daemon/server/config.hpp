// What a daemon is told to do: where it lives, which GPUs it hands out, and
// how it peers with other daemons. Filled by the command line (options.hpp)
// or by an embedding launcher; checked by Server and peer::Security.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/quotas.hpp"

#include "peer/settings.hpp"

namespace muster::daemon {

struct Config {
  std::string runtime_dir;  // where musterd.sock and musterd.lock live
  // Where state.msgpack (jobs, leases, stores; persist/state_file.hpp)
  // lives; empty = runtime_dir, which is tmpfs under /run: the state
  // survives a daemon restart but not a reboot.
  std::string state_dir;
  std::vector<int64_t> devices;  // allowed subset; empty = all discovered
  bool devices_given = false;
  int simulate_gpus = -1;
  // An embedded daemon (started by muster run) ends once it has had no job
  // for a moment, so it outlives its launcher only while others use it.
  bool exit_when_idle = false;
  // Group that may use the socket (chown to it, mode 0660); -1 = leave it.
  int64_t socket_gid = -1;

  // Peering with other daemons (multi-node jobs). Listening on the network
  // is opt-in: no listener while peer_bind is empty; outgoing links to a
  // job's coordinator work either way. Port 0 = any free port (tests).
  std::string peer_bind;
  int peer_port = 29400;
  // A peer silent for this long is lost (heartbeats every quarter of it).
  std::chrono::milliseconds peer_timeout{10000};
  // A barrier or key wait parked this long is stuck: logged once, counted.
  std::chrono::milliseconds stuck_after{60000};
  // CURVE between daemons, or plain TCP on purpose (peer/settings.hpp).
  peer::PeerSettings peer_keys;
  // Children per daemon in the relay tree of the jobs we coordinate; a job
  // of at most this many nodes is a flat star. 0 = always a star.
  uint32_t tree_width = 16;
  // This node's name in other nodes' rendezvous progress; empty = the host
  // name.
  std::string node_name;

  // How a job's processes are kept together and ended with it
  // (contain/job_cgroups.hpp): "auto" = a cgroup per job where a cgroup v2
  // hierarchy is writable, else muster run's guardian only; "guardian" =
  // never a cgroup.
  std::string containment = "auto";
  // A GPU running a process that is not muster's: "refuse" (not leased) or
  // "warn" (leased, logged). Needs NVML.
  std::string foreign_gpu_use = "refuse";
  // Who says which GPUs a Slurm job may lease: "client" (its device list
  // and Slurm variables, which may only narrow what it is given) or
  // "verified" (Slurm: the job from the kernel, its GPUs from the prolog
  // hook's files in slurm_dir; slurm/verified_gpus.hpp).
  std::string slurm_gpus = "client";
  std::string slurm_dir = "/run/muster/slurm";
  // Bounded resources (doc/operating.md, "Limits"). File descriptors kept free below
  // RLIMIT_NOFILE: at the limit less this many, new connections wait
  // (server/fd_guard.hpp); 0 = max(256, limit / 16).
  uint64_t fd_reserve = 0;
  // Replies queued for one local connection (ZMQ_SNDHWM); one more is
  // dropped and the client sends its request again.
  int reply_queue = 8;
  // Connections one local uid, or one peer address, may hold open at once
  // (server/conn_caps.hpp); the next is refused at its handshake. 0 = no
  // cap. A rank needs one or two; 4,096 is a sixteenth of the unit's
  // LimitNOFILE=65536, so that sixteen users' worth always fit. Peer
  // daemons hold one link per coordinator they talk to.
  uint64_t max_conns_per_uid = 4096;
  uint64_t max_conns_per_peer = 1024;
  // Operating the node (doc/operating.md, "Watching the node"): where the Prometheus
  // exporter listens (ADDR:PORT; empty = no exporter), and where
  // dcgm-exporter's job mapping files are kept (empty = none).
  std::string metrics_listen;
  std::string job_mapping_dir;
  // Per-job and per-uid quotas (core/quotas.hpp has the defaults and why).
  Quotas quotas;
  // quotas.memory and quotas.state are derived from the machine at start
  // (core/ceilings.hpp) unless --max-memory / --max-state-bytes name them.
  std::string max_memory = "auto";
  std::string max_state_bytes = "auto";
};

}  // namespace muster::daemon
