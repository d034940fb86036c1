// The NCCL unique-id broker, on top of the job's store: compare_set makes the
// publish a set-once, and a waiting get is answered the moment the root
// publishes. The daemon never interprets the 128 bytes.
#include <algorithm>
#include <cstdlib>

#include "gpu_libs.hpp"
#include "muster/broadcast.hpp"
#include "session.hpp"

namespace muster {

namespace {

// NCCL's id as nccl.h declares it (ncclUniqueId: char internal[128];
// ncclResult_t: an enum, int-sized, ncclSuccess = 0), so the broker needs
// no NCCL header and links no NCCL: the library is found at run time.
constexpr size_t kIdBytes = 128;
struct UniqueId {
  char internal[kIdBytes];
};

// Made by the NCCL the process uses (torch's, where torch loaded one). An
// id of random bytes would hang whoever hands it to NCCL, so without NCCL
// there is no id, only an error that says NCCL was not found.
std::string make_id() {
  const auto& lib = detail::nccl();
  auto get = lib.fn<int (*)(UniqueId*)>("ncclGetUniqueId");
  auto why = lib.fn<const char* (*)(int)>("ncclGetErrorString");
  UniqueId id{};
  if (int r = get(&id); r != 0)
    throw Error(ErrorCode::kInternal,
                std::string("ncclGetUniqueId failed: ") +
                    (why ? std::string(why(r)) : "error " + std::to_string(r)) + " (" +
                    lib.where() + ")");
  return std::string(id.internal, kIdBytes);
}

std::string id_key(const RankInfo& me, const std::string& name, uint32_t i, uint32_t n) {
  if (name.empty() || name.size() > 256)
    throw Error(ErrorCode::kInvalidArgument, "communicator name must be 1..256 bytes");
  return "muster.nccl/" + std::to_string(me.generation) + "/" + name + "/" + std::to_string(n) +
         "/" + std::to_string(i);
}

}  // namespace

uint32_t nccl_id_root(uint32_t i, uint32_t n, uint32_t world_size) {
  // The first rank of root i's block, as NCCL's bootstrap splits the ranks
  // among n roots. NVIDIA/nccl src/bootstrap.cc, firstRankFromRoot (2.23+):
  //   return root * (n_ranks / nRoots) + std::min(root, n_ranks % nRoots);
  // blocks of world/n ranks, the first world%n of them one rank larger. The id must be
  // made by that rank, which runs root i's bootstrap; i*world/n would pick
  // another rank whenever n does not divide world (7 ranks, 3 ids: 0, 3, 5,
  // not 0, 2, 4).
  return i * (world_size / n) + std::min(i, world_size % n);
}

std::vector<std::string> nccl_unique_ids(Client& client, uint32_t n, const std::string& name,
                                         std::optional<std::chrono::milliseconds> timeout) {
  const RankInfo& me = client.rank_info();
  if (n < 1 || n > me.world_size)
    throw Error(ErrorCode::kInvalidArgument,
                "nccl_unique_ids needs 1.." + std::to_string(me.world_size) +
                    " ids (one per rank at most), not " + std::to_string(n));
  // With NCCL_COMM_ID set, NCCL's id is that address and rank 0's
  // ncclCommInitRank listens on it (src/init.cc): one root, so one id. More
  // would all name the same address and their bootstraps would collide.
  if (const char* fixed = std::getenv("NCCL_COMM_ID"); fixed && *fixed && n > 1)
    throw Error(ErrorCode::kInvalidArgument,
                "NCCL_COMM_ID=" + std::string(fixed) + " fixes NCCL's one bootstrap root, but " +
                    std::to_string(n) +
                    " ids were asked for (ncclCommInitRankScalable): ask for 1 id, or unset "
                    "NCCL_COMM_ID to let each root pick its own address");
  // Publish first (if we are a root), then gather: no rank waits on itself.
  for (uint32_t i = 0; i < n; ++i) {
    if (nccl_id_root(i, n, me.world_size) != me.rank) continue;
    auto key = id_key(me, name, i, n);
    auto id = make_id();
    if (client.compare_set(key, "", id) != id)
      throw Error(ErrorCode::kConflict, "NCCL unique id " + std::to_string(i) +
                                            " of communicator '" + name + "' (generation " +
                                            std::to_string(me.generation) +
                                            ") was already published; use a new communicator name");
  }
  std::vector<std::string> ids;
  for (uint32_t i = 0; i < n; ++i) {
    auto key = id_key(me, name, i, n);
    try {
      ids.push_back(client.get(key, timeout));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kTimeout) throw;
      throw Error(ErrorCode::kTimeout, "timed out waiting for NCCL unique id " + std::to_string(i) +
                                           " of communicator '" + name + "' (generation " +
                                           std::to_string(me.generation) + "): rank " +
                                           std::to_string(nccl_id_root(i, n, me.world_size)) +
                                           " was expected to publish it");
    }
    if (ids.back().size() != kIdBytes)
      throw Error(ErrorCode::kBadMessage, "NCCL unique id under '" + key + "' is " +
                                              std::to_string(ids.back().size()) +
                                              " bytes, not 128");
  }
  return ids;
}

std::string nccl_unique_id(Client& client, const std::string& name,
                           std::optional<std::chrono::milliseconds> timeout) {
  return nccl_unique_ids(client, 1, name, timeout)[0];
}

}  // namespace muster
