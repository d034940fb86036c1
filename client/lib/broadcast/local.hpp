// A broadcast inside one node, through shared memory (see broadcast.cpp).
// Not installed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

#include "collective.hpp"

// Internal to libmuster: hidden, so the version script's muster::* does not
// export it.
#pragma GCC visibility push(hidden)
namespace muster::bcast {

// The bytes of `layout` from root to every other rank of one node
// (muster::broadcast, and sync_model without reduce flags), by the path
// MUSTER_BCAST picks; `local` is an error this rank found before, reported
// through the collective. A reader's `agree` throws when the root's
// metadata does not fit this rank's layout.
void local_broadcast(Collective& col, const Layout& layout, uint64_t signature, uint32_t root,
                     const std::optional<Error>& local, std::chrono::milliseconds wait,
                     const std::function<void(const Meta&)>& agree);

}  // namespace muster::bcast
#pragma GCC visibility pop
