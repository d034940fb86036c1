// libmuster's C++ API: a training process asks its node's musterd who it is
// and shares small values with the other ranks of its job. The collectives
// are in muster/broadcast.hpp, the launcher API in muster/launcher.hpp.
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

class Client;

namespace detail {
// A client's connection to its daemon and the rank it joined; internal to
// libmuster.
class Session;
// How libmuster's own free functions (collectives, launcher API) reach a
// Client's session; internal to libmuster, not for applications.
Session& session_of(Client& client);
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
  // The leased GPU's UUID ("GPU-…"), which select_device checks against the
  // device CUDA opens; empty without a lease or where NVML gives none.
  std::string device_uuid{};
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
  // Whose job (a uid); default -1: the caller's own. Each user's job names
  // are their own: only root may name another owner, and root's rank then
  // joins only from a process that job's launcher registered (a worker of
  // `muster run --owner`). The rank's job is then spelled "name~uid" in
  // rank_info().job.
  // @since 0.3
  int64_t owner = -1;
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
  // The daemon's GPUs, jobs and ranks (as `muster status` shows them).
  DaemonStatus status();
  // The same for one job (Error kUnknownJob when the daemon has none the
  // caller may see); for a job that spans nodes, with the whole job's open
  // barriers and waits as its coordinator sees them.
  // @since 0.1
  DaemonStatus status(const std::string& job);
  // Root (or the daemon's own uid) only: drains GPU `device` (an NVML
  // index) for `reason` — its holder keeps it until its rank ends, nobody
  // is given it after, and the drain survives daemon restarts — or
  // undrains it (which also clears a critical XID's quarantine: the GPU
  // was reset). Error kPermissionDenied for anyone else.
  void drain_gpu(uint32_t device, const std::string& reason);
  void undrain_gpu(uint32_t device);

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
  // How many keys start with prefix ("": every key of the job's store).
  int64_t num_keys(const std::string& prefix = "");

  // torch's newer Store API, with torch's meaning.
  // Appends value to key's value; an absent key is created.
  void append(const std::string& key, const std::string& value);
  // Sets keys[i] to values[i], all in one step (1..1024 keys).
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values);
  // The values of keys, in order, once all exist (up to the timeout).
  std::vector<std::string> multi_get(
      const std::vector<std::string>& keys,
      std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // Appends value to the queue at key (the key exists while it is not empty).
  void queue_push(const std::string& key, const std::string& value);
  // Takes the queue's first item, waiting for one up to the timeout
  // (Error kTimeout); a timeout of 0 does not wait (Error kNotFound).
  std::string queue_pop(const std::string& key,
                        std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  int64_t queue_len(const std::string& key);
  // The keys that start with prefix, sorted.
  std::vector<std::string> list_keys(const std::string& prefix = "");
  // A second connection to the daemon acting for the same job and rank
  // (torch's Store.clone): for another thread, whose waits then do not
  // queue behind this client's. Joins nothing; leave() stays this one's.
  Client clone() const;

  // This rank's indices of torch.utils.data.distributed.DistributedSampler
  // (num_replicas = the job's world size, rank = this client's), bit-identical
  // to torch; the daemon computes each epoch's permutation once for all ranks.
  struct ShardOptions {
    // len(dataset); default 0.
    uint64_t dataset_size = 0;
    // The sampler's set_epoch(); default 0.
    uint64_t epoch = 0;
    // The sampler's seed; default 0.
    uint64_t seed = 0;
    // Permute the indices (seeded by seed + epoch); default true.
    bool shuffle = true;
    // Drop the tail instead of padding every rank to the same length;
    // default false.
    bool drop_last = false;
    // Resumption: how many indices of the epoch's permutation (torch's
    // order, unpadded) are already used, <= dataset_size; the ranks share
    // the rest as torch shares a whole epoch. Default 0 (torch's sampler).
    uint64_t consumed = 0;
  };
  std::vector<int64_t> sampler_shard(const ShardOptions& options);
  // Resumable samplers: records with the daemon that `progress.consumed`
  // indices of epoch `progress.epoch` are used, for the sampler known by
  // (dataset_size, seed, shuffle); kept for the later generations of this
  // muster run (restarts, re-forms), dropped when the run ends. The last
  // commit wins. A job that spans nodes keeps it with its coordinator, so
  // a re-form that lost the committing node still finds it.
  void sampler_commit(const ShardOptions& progress);
  // The last commit of that sampler in this run (epoch, consumed and
  // drop_last filled in, ready for sampler_shard), or nullopt.
  std::optional<ShardOptions> sampler_resume(uint64_t dataset_size, uint64_t seed, bool shuffle);

 private:
  friend detail::Session& detail::session_of(Client& client);
  std::unique_ptr<detail::Session> session_;
};

}  // namespace muster
