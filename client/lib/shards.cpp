// Client::sampler_shard: asks the daemon for this rank's DistributedSampler
// indices (see daemon/core/shards.cpp for the wire choice).
#include <bit>
#include <cstring>

#include "muster/client.hpp"
#include "protocol/messages.hpp"
#include "protocol/sampler_messages.hpp"
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
  proto::Shard m{job,       session_->rank().rank, o.dataset_size, o.epoch, o.seed,
                 o.shuffle, o.drop_last,           o.consumed};
  if (m.dataset_size > proto::kMaxDatasetSize)
    throw Error(ErrorCode::kInvalidArgument,
                "dataset_size " + std::to_string(o.dataset_size) + " is over the limit of 2^40");
  if (o.consumed > o.dataset_size)
    throw Error(ErrorCode::kInvalidArgument, "consumed " + std::to_string(o.consumed) +
                                                 " is over dataset_size " +
                                                 std::to_string(o.dataset_size));
  auto r = session_->call<proto::ShardReply>(m, kShardExtraWait);
  return r.width == 4 ? widen<uint32_t>(r.indices, r.count) : widen<uint64_t>(r.indices, r.count);
}

void Client::sampler_commit(const ShardOptions& o) {
  const std::string& job = session_->job();
  if (o.consumed > o.dataset_size)
    throw Error(ErrorCode::kInvalidArgument, "consumed " + std::to_string(o.consumed) +
                                                 " is over dataset_size " +
                                                 std::to_string(o.dataset_size));
  session_->call<proto::Ok>(proto::SamplerCommit{job, session_->rank().rank, o.dataset_size, o.seed,
                                                 o.shuffle, o.drop_last, o.epoch, o.consumed});
}

std::optional<Client::ShardOptions> Client::sampler_resume(uint64_t dataset_size, uint64_t seed,
                                                           bool shuffle) {
  auto r = session_->call<proto::SamplerPlace>(
      proto::SamplerResume{session_->job(), dataset_size, seed, shuffle});
  if (!r.found) return std::nullopt;
  return ShardOptions{dataset_size, r.epoch, seed, shuffle, r.drop_last, r.consumed};
}

}  // namespace muster
