// The field lists of the resumable sampler's messages (sampler_messages.hpp).
#include "protocol/sampler_messages.hpp"

#include "protocol/fields.hpp"

namespace muster::proto {

namespace {

// The fields that name a sampler within a run: (dataset_size, seed,
// shuffle), in a commit and in the resume that looks it up.
template <class IO, class M>
void sampler_key(IO& io, M& m) {
  io.num("dataset_size", m.dataset_size, 0, kMaxDatasetSize);
  io.num("seed", m.seed, 0, UINT64_MAX);
  io.boolean("shuffle", m.shuffle);
}

}  // namespace

template <class IO>
void SamplerCommit::fields(IO& io) {
  io.job(job);
  io.num("rank", rank, 0, UINT32_MAX);
  sampler_key(io, *this);
  io.boolean("drop_last", drop_last);
  io.num("epoch", epoch, 0, UINT64_MAX);
  io.num("consumed", consumed, 0, kMaxDatasetSize);
  io.check([&] {
    if (consumed > dataset_size)
      throw Error(ErrorCode::kInvalidArgument,
                  "sampler_commit.consumed " + std::to_string(consumed) + " is over dataset_size " +
                      std::to_string(dataset_size));
  });
}

template <class IO>
void SamplerResume::fields(IO& io) {
  io.job(job);
  sampler_key(io, *this);
}

template <class IO>
void SamplerPlace::fields(IO& io) {
  io.boolean("found", found);
  io.num("epoch", epoch, 0, UINT64_MAX);
  io.num("consumed", consumed, 0, kMaxDatasetSize);
  io.boolean("drop_last", drop_last);
}

MUSTER_CODEC(SamplerCommit)
MUSTER_CODEC(SamplerResume)
MUSTER_CODEC(SamplerPlace)

}  // namespace muster::proto
