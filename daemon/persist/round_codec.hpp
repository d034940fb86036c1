// The bytes of a coordinator's rounds in the state file (cluster/cluster.hpp
// CoordJob, one per job coordinated here): a "rounds" array in the snapshot,
// and in the change log a header record per changed round (all but its
// store) and a record per key of its global store set or erased
// (state_codec.hpp's kRound* types). Barrier arrivals and parked waits are
// not saved: the node daemons send them again (cluster/node.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include <functional>

#include "cluster/cluster.hpp"
#include "protocol/codec.hpp"

namespace muster::daemon::round_codec {

// One round as a map; with_store adds the global store's keys (snapshot).
// spill: as state_codec::encode_snapshot's, between the store's keys.
void pack_round(codec::Packer& p, const std::string& job, const CoordJob& cj, bool with_store,
                const std::function<void()>& spill = nullptr);
std::string round_record(const std::string& job, const CoordJob& cj);
// For a closed round, what can change in its record between two saves
// without a new generation or incarnation: while it is the same, so is
// round_record (a node's entry changes only by leaving; the rest of a
// closed round's nodes is fixed at its close). Empty for an open round,
// whose record is small and encoded every time.
std::string fingerprint(const CoordJob& cj);
// Throws Error(kBadMessage) when the map does not decode.
std::pair<std::string, CoordJob> decode_round(const msgpack::object& o, const std::string& what);

// The change log's records of rounds (state_codec.hpp's kRound, kRoundGone,
// kRoundKey, kRoundKeyGone, whose payloads are those of its kJob, kJobGone,
// kKey and kKeyGone) applied to the rounds read so far.
void apply(std::map<std::string, CoordJob>& rounds, uint8_t type, const msgpack::object& o);

}  // namespace muster::daemon::round_codec
