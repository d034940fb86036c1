// Broadcast across nodes (see broadcast_nodes.cpp): Client::broadcast and
// Client::sync_model (without reduce flags) of a job that spans nodes. Not
// installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "broadcast_layout.hpp"
#include "muster/client.hpp"

// Internal to libmuster: hidden, so the version script's muster::* does not
// export it.
#pragma GCC visibility push(hidden)
namespace muster {

class NodeBroadcast {
 public:
  // One buffer of the caller at `offset` of the bytes a broadcast moves
  // (sync_model packs several, aligned, zeros between them). In increasing
  // offset order, not overlapping.
  using Piece = bcast::Piece;
  // Every rank of the job calls it with the same total and signature (what
  // the pieces are, so that ranks can check they agree); every rank ends
  // with root's bytes or throws. `local`: an error this rank found before,
  // reported through the collective so that the others do not wait for it.
  static void run(Client& c, const std::vector<Piece>& pieces, size_t total, uint64_t signature,
                  uint32_t root, const char* what, std::optional<Error> local = std::nullopt);
};

}  // namespace muster
#pragma GCC visibility pop
