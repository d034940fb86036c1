// Client::sampler_shard: asks the daemon for this rank's DistributedSampler
// indices (see daemon/core/shards.cpp for the wire choice).
#include <bit>
#include <cstring>

#include "muster/client.hpp"
#include "protocol/messages.hpp"
#include "session.hpp"

namespace muster {

namespace {

// The first request of an epoch waits while the daemon computes the
// permutation (seconds at its size cap), and later ranks queue behind it.
constexpr std::chrono::milliseconds kShardExtraWait{60000};

template <class U>
std::vector<int64_t> widen(const std::string& bytes, uint64_t count) {
  std::vector<int64_t> out(count);
  const char* p = bytes.data();
  for (uint64_t k = 0; k < count; ++k) {
    U x;
    std::memcpy(&x, p + k * sizeof(U), sizeof(U));
    if constexpr (std::endian::native == std::endian::big) {
      if constexpr (sizeof(U) == 4)
        x = __builtin_bswap32(x);
      else
        x = __builtin_bswap64(x);
    }
    out[k] = static_cast<int64_t>(x);
  }
  return out;
}

}  // namespace

std::vector<int64_t> Client::sampler_shard(const ShardOptions& o) {
  const std::string& job = session_->job();
  proto::Shard m{job,        session_->rank().rank, o.dataset_size, o.epoch, o.seed, o.shuffle,
                 o.drop_last};
  if (m.dataset_size > proto::kMaxDatasetSize)
    throw Error(ErrorCode::kInvalidArgument,
                "dataset_size " + std::to_string(o.dataset_size) + " is over the limit of 2^40");
  auto r = session_->call<proto::ShardReply>(m, kShardExtraWait);
  return r.width == 4 ? widen<uint32_t>(r.indices, r.count) : widen<uint64_t>(r.indices, r.count);
}

}  // namespace muster
