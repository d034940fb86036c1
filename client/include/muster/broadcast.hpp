// libmuster's collectives: model broadcast, model sync and NCCL unique ids.
// Every rank of the job calls them, in the same order, on a joined Client.
// Errors are muster::Error exceptions.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "muster/client.hpp"

namespace muster {

// One buffer of a model, as sync_model takes it.
struct Buffer {
  // Where the bytes are (required unless size is 0).
  void* data = nullptr;
  // Its length in bytes; default 0.
  size_t size = 0;
  // How the bytes are read when averaged; default kBytes (never averaged:
  // always taken from rank 0).
  enum class Type { kBytes, kFloat32, kFloat64 } type = Type::kBytes;
  // A parameter (averaged with reduce_parameters) or another buffer, such as
  // a batch-norm statistic (averaged with reduce_buffers); default true.
  bool is_parameter = true;
};

// Every rank ends with root's `size` bytes (sizes must agree). On one node,
// bytes travel through POSIX shared memory, never through the daemon. A job
// that spans nodes moves them in chunks from the root's daemon to one rank of
// every other node through the daemons, then through shared memory inside
// each node. A rank or node that dies makes the others throw (peer_exited).
// After an exception the buffers' contents are unspecified.
void broadcast(Client& client, void* data, size_t size, uint32_t root = 0);

// One collective for all buffers (all ranks pass the same list): by default
// every rank ends with rank 0's bytes; with reduce_parameters (reduce_buffers)
// the float parameter (non-parameter) buffers are averaged across ranks
// instead: summed in rank order in double, divided by the world size, rounded
// once, so every rank ends with identical bits. kBytes buffers are always
// taken from rank 0. Across nodes, averaging is refused (invalid_argument,
// before any rank waits): use a collective library's all-reduce there;
// sync_model without reduce flags works.
void sync_model(Client& client, const std::vector<Buffer>& buffers, bool reduce_parameters = false,
                bool reduce_buffers = false);

// NCCL unique ids brokered by the daemon (opaque 128-byte values). The root
// (rank 0) makes the id (ncclGetUniqueId when built with NCCL, else random
// bytes) and publishes it under (job, generation, name); every other rank
// waits for it (up to timeout, default the client's wait_timeout). A second
// publish of the same name is refused.
std::string nccl_unique_id(Client& client, const std::string& name = "world",
                           std::optional<std::chrono::milliseconds> timeout = std::nullopt);

// n ids for ncclCommInitRankScalable, in order; id i is made by rank
// nccl_id_root(i, n, world_size), and all ranks gather all n.
std::vector<std::string> nccl_unique_ids(
    Client& client, uint32_t n, const std::string& name = "world",
    std::optional<std::chrono::milliseconds> timeout = std::nullopt);

// The first rank NCCL's bootstrap gives root i of n:
// i*(world/n) + min(i, world%n).
uint32_t nccl_id_root(uint32_t i, uint32_t n, uint32_t world_size);

}  // namespace muster
