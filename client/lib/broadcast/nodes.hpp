// Broadcast across nodes (see nodes.cpp): muster::broadcast and
// muster::sync_model (without reduce flags) of a job that spans nodes. Not
// installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "layout.hpp"
#include "muster/client.hpp"

// Internal to libmuster: hidden, so the version script's muster::* does not
// export it.
#pragma GCC visibility push(hidden)
namespace muster::bcast {

// Every rank of the job calls it with the same total and signature (what
// the pieces are, so that ranks can check they agree); every rank ends with
// root's bytes or throws. pieces: the caller's buffers at their offsets of
// the bytes moved (sync_model packs several, aligned, zeros between them),
// in increasing offset order, not overlapping. `local`: an error this rank
// found before, reported through the collective so that the others do not
// wait for it. s: c's session, whose connection carries the chunks.
void broadcast_across_nodes(Client& c, detail::Session& s, const std::vector<Piece>& pieces,
                            size_t total, uint64_t signature, uint32_t root, const char* what,
                            std::optional<Error> local = std::nullopt);

}  // namespace muster::bcast
#pragma GCC visibility pop
