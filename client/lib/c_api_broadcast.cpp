// The C ABI of model broadcast (muster/muster.h): muster_broadcast and
// muster_sync_model.
#include <string>
#include <vector>

#include "c_api_guard.hpp"
#include "muster/broadcast.hpp"
#include "muster/muster.h"

using muster::capi::guarded;

extern "C" {

int muster_broadcast(muster_client* c, void* data, size_t size, uint32_t root) {
  return guarded(c, [&](muster::Client& cl) { muster::broadcast(cl, data, size, root); });
}

int muster_sync_model(muster_client* c, muster_buffer* bufs, size_t n, int reduce_parameters,
                      int reduce_buffers) {
  return guarded(c, [&](muster::Client& cl) {
    if (!bufs && n)
      throw muster::Error(muster::ErrorCode::kInvalidArgument, "bufs must not be NULL");
    using T = muster::Buffer::Type;
    static constexpr T kTypes[] = {T::kBytes, T::kFloat32, T::kFloat64};
    std::vector<muster::Buffer> v;
    v.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      if (bufs[i].type < 0 || bufs[i].type > 2)
        throw muster::Error(muster::ErrorCode::kInvalidArgument,
                            "bufs[" + std::to_string(i) + "].type is " +
                                std::to_string(bufs[i].type) +
                                "; use 0 (bytes), 1 (float32) or 2 (float64)");
      v.push_back({bufs[i].data, bufs[i].size, kTypes[bufs[i].type], bufs[i].is_parameter != 0});
    }
    muster::sync_model(cl, v, reduce_parameters != 0, reduce_buffers != 0);
  });
}

}  // extern "C"
