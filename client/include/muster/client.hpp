// libmuster's C++ API: a training process asks its node's musterd who it is
// and shares small values with the other ranks of its job.
// Errors are muster::Error exceptions carrying the protocol's ErrorCode.
// A Client is not thread-safe; use one per thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "muster/error.hpp"
#include "muster/status.hpp"
#include "muster/version.h"

namespace muster {

namespace detail {
// A client's connection to its daemon and the rank it joined; internal to
// libmuster.
class Session;
}  // namespace detail

struct RankInfo {
  std::string job;
  uint32_t rank = 0;
  uint32_t local_rank = 0;
  uint32_t world_size = 1;
  uint32_t local_world_size = 1;
  uint32_t node_rank = 0;
  uint32_t num_nodes = 1;
  int device = -1;  // leased GPU index, -1 for none
  uint64_t generation = 0;
};

// What Client::join asks for.
struct JoinOptions {
  // The job's id (required): ranks that name the same job share its world.
  std::string job;
  // Ranks of the job on this node; default 1.
  uint32_t local_world_size = 1;
  // Lease a GPU for this rank when the node has free ones; default true.
  bool wants_gpu = true;
  // The local rank to take; default -1: any free one.
  int local_rank = -1;
};

// How a Client reaches its daemon.
struct ClientOptions {
  // The daemon's ZeroMQ endpoint; default empty: MUSTER_ENDPOINT, else the
  // socket in MUSTER_RUNTIME_DIR, else the system daemon's.
  std::string endpoint;
  // How long a request may go unanswered before the daemon counts as gone;
  // default 10 s. A daemon that still exists (paused) is waited for up to
  // wait_timeout instead.
  std::chrono::milliseconds request_timeout{10000};
  // Default for waits, barriers, get() and collectives; default 300 s (as
  // torch's); MUSTER_TIMEOUT_S overrides it.
  std::chrono::milliseconds wait_timeout{300000};
};

class Client {
 public:
  explicit Client(ClientOptions options = {});
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& endpoint() const;

  // Round trip to the daemon; returns its version.
  std::string ping();
  DaemonStatus status();

  // Takes a local rank (and a GPU lease when wants_gpu and the node has GPUs).
  RankInfo join(const JoinOptions& options);
  // Joins with what `muster run` put in the environment (MUSTER_JOB_ID,
  // LOCAL_RANK, LOCAL_WORLD_SIZE, MUSTER_WANTS_GPU).
  RankInfo join_from_env();
  // Gives the rank and its lease back before the process ends.
  void leave();

  bool joined() const;
  const RankInfo& rank_info() const;  // throws unless joined
  bool is_master() const { return rank_info().rank == 0; }
  bool is_local_master() const { return rank_info().local_rank == 0; }

  // Returns when every rank of the job has called barrier(name).
  void barrier(const std::string& name = "default",
               std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  // The job's key/value store (torch.distributed.Store semantics).
  void set(const std::string& key, const std::string& value);
  // Waits until the key exists (up to the timeout), like torch's Store.get.
  std::string get(const std::string& key,
                  std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  std::optional<std::string> try_get(const std::string& key);
  int64_t add(const std::string& key, int64_t delta);
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired);
  bool remove(const std::string& key);
  void wait(const std::vector<std::string>& keys,
            std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  // Model broadcast. Collectives: every rank calls them in the same order.
  // On one node, bytes travel through POSIX shared memory, never through the
  // daemon. A job that spans nodes moves them in chunks from the root's
  // daemon to one rank of every other node through the daemons, then
  // through shared memory inside each node. A rank or node that dies makes the others throw
  // (peer_exited). After an exception the buffers' contents are unspecified.
  // Every rank ends with root's `size` bytes (sizes must agree).
  void broadcast(void* data, size_t size, uint32_t root = 0);
  struct Buffer {
    void* data;
    size_t size;  // in bytes
    enum class Type { kBytes, kFloat32, kFloat64 } type = Type::kBytes;
    bool is_parameter = true;
  };
  // One collective for all buffers (all ranks pass the same list): by default
  // every rank ends with rank 0's bytes; with reduce_parameters (reduce_buffers)
  // the float parameter (non-parameter) buffers are averaged across ranks
  // instead: summed in rank order in double, divided by the world size,
  // rounded once, so every rank ends with identical bits. kBytes buffers are
  // always taken from rank 0. Across nodes, averaging is refused
  // (invalid_argument, before any rank waits): use a collective library's
  // all-reduce there; sync_model without reduce flags works.
  void sync_model(const std::vector<Buffer>& buffers, bool reduce_parameters = false,
                  bool reduce_buffers = false);

  // This rank's indices of torch.utils.data.distributed.DistributedSampler
  // (num_replicas = the job's world size, rank = this client's), bit-identical
  // to torch; the daemon computes each epoch's permutation once for all ranks.
  struct ShardOptions {
    uint64_t dataset_size = 0;
    uint64_t epoch = 0;
    uint64_t seed = 0;
    bool shuffle = true;
    bool drop_last = false;
  };
  std::vector<int64_t> sampler_shard(const ShardOptions& options);

  // For launchers (`muster run`): book all local ranks of a new job, and
  // their GPUs, for launcher_pid; returns the device of each local rank.
  // generation: the job's generation (muster run's restart count).
  struct Reservation {
    uint64_t generation = 0;
    std::vector<int> devices;  // by local rank; -1 = no GPU
  };
  Reservation reserve(const std::string& job, uint32_t local_world_size, bool wants_gpu,
                      const std::vector<int>& allowed_devices, int64_t launcher_pid,
                      uint64_t generation = 0);
  // Hands the reserved ranks to the started workers (pids by local rank).
  void attach(const std::string& job, const std::vector<int64_t>& pids);

  // For launchers of multi-node jobs, after reserve(): join the job's world
  // through the coordinating daemon (torchrun's c10d rendezvous). Blocks
  // until the world of a generation forms (or timeout).
  struct RendezvousOptions {
    std::string coordinator;  // host:port of the coordinating daemon's peer socket
    int node_rank = -1;       // fixed node order when >= 0
    uint32_t min_nodes = 1;
    uint32_t max_nodes = 1;
    std::chrono::milliseconds last_call{std::chrono::seconds(30)};
    std::chrono::milliseconds timeout{std::chrono::seconds(900)};
    std::string master_addr;  // this node's address, MASTER_ADDR if it becomes node 0
    int master_port = 0;
  };
  struct World {
    uint64_t generation = 0;
    uint32_t node_rank = 0;
    uint32_t num_nodes = 1;
    uint32_t rank_offset = 0;  // global rank of local rank 0
    uint32_t world_size = 1;
    std::string master_addr;
    int master_port = 0;
  };
  World rendezvous(const std::string& job, const RendezvousOptions& options);
  // How a multi-node job's world is doing: state is running, broken (a
  // node was lost or restarted: restart the workers), waiting (nodes wait
  // to join the next generation) or forming.
  struct JobState {
    uint64_t generation = 0;
    std::string state;
    std::string message;
  };
  JobState cluster_state(const std::string& job);

  // NCCL unique ids brokered by the daemon (opaque 128-byte values). The
  // root (rank 0) makes the id (ncclGetUniqueId when built with NCCL, else
  // random bytes) and publishes it under (job, generation, name); every other
  // rank waits for it. A second publish of the same name is refused.
  std::string nccl_unique_id(const std::string& name = "world",
                             std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // n ids for ncclCommInitRankScalable, in order; id i is made by rank
  // nccl_id_root(i, n, world_size), the first rank NCCL's bootstrap gives
  // root i (i*(world/n) + min(i, world%n)), and all ranks gather all n.
  std::vector<std::string> nccl_unique_ids(
      uint32_t n, const std::string& name = "world",
      std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  static uint32_t nccl_id_root(uint32_t i, uint32_t n, uint32_t world_size);

 private:
  std::unique_ptr<detail::Session> session_;
};

}  // namespace muster
