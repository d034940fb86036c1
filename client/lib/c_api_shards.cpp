// C ABI for sampler shards.
#include <cstdlib>
#include <cstring>

#include "c_api_guard.hpp"
#include "muster/client.hpp"
#include "muster/muster.h"

extern "C" {

int muster_sampler_shard(muster_client* c, uint64_t dataset_size, uint64_t epoch, uint64_t seed,
                         int shuffle, int drop_last, int64_t** indices, size_t* count) {
  return muster_sampler_shard_from(c, dataset_size, epoch, seed, shuffle, drop_last, 0, indices,
                                   count);
}

int muster_sampler_shard_from(muster_client* c, uint64_t dataset_size, uint64_t epoch,
                              uint64_t seed, int shuffle, int drop_last, uint64_t consumed,
                              int64_t** indices, size_t* count) {
  using muster::capi::null_arg;
  return muster::capi::guarded(c, [&](muster::Client& cl) {
    if (!indices) throw null_arg("indices");
    if (!count) throw null_arg("count");
    auto v = cl.sampler_shard({dataset_size, epoch, seed, shuffle != 0, drop_last != 0, consumed});
    // malloc(0) may return NULL; always hand out a pointer muster_free accepts.
    auto* p = static_cast<int64_t*>(std::malloc(v.empty() ? 1 : v.size() * sizeof(int64_t)));
    if (!p) throw std::bad_alloc();
    if (!v.empty()) std::memcpy(p, v.data(), v.size() * sizeof(int64_t));
    *indices = p;
    *count = v.size();
  });
}

int muster_sampler_commit(muster_client* c, uint64_t dataset_size, uint64_t epoch, uint64_t seed,
                          int shuffle, int drop_last, uint64_t consumed) {
  return muster::capi::guarded(c, [&](muster::Client& cl) {
    cl.sampler_commit({dataset_size, epoch, seed, shuffle != 0, drop_last != 0, consumed});
  });
}

int muster_sampler_resume(muster_client* c, uint64_t dataset_size, uint64_t seed, int shuffle,
                          int* found, uint64_t* epoch, uint64_t* consumed) {
  using muster::capi::null_arg;
  return muster::capi::guarded(c, [&](muster::Client& cl) {
    if (!found) throw null_arg("found");
    if (!epoch) throw null_arg("epoch");
    if (!consumed) throw null_arg("consumed");
    auto place = cl.sampler_resume(dataset_size, seed, shuffle != 0);
    *found = place ? 1 : 0;
    *epoch = place ? place->epoch : 0;
    *consumed = place ? place->consumed : 0;
  });
}

}  // extern "C"
