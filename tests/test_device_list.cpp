// CUDA_VISIBLE_DEVICES read as CUDA reads it (device_list.hpp): integers
// count the GPUs CUDA sees here, UUIDs and unique prefixes name only those,
// MIG instances are refused.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "device_list.hpp"

using muster::visible_devices;

namespace {
const std::vector<std::string> kUuids = {"GPU-aa00", "GPU-ab11", "GPU-ba22", "GPU-bb33"};
}

TEST_CASE("integers count the GPUs CUDA sees, not NVML's indices") {
  CHECK(visible_devices("0,1", kUuids, {0, 1, 2, 3}) == std::vector<int64_t>{0, 1});
  // A cgroup allows NVML's 1 and 3: CUDA's 0 and 1.
  CHECK(visible_devices("1,0", kUuids, {1, 3}) == std::vector<int64_t>{3, 1});
  // Past what CUDA sees, the list ends, as CUDA's does.
  CHECK(visible_devices("1,2,0", kUuids, {1, 3}) == std::vector<int64_t>{3});
  CHECK(visible_devices("-1", kUuids, {0, 1}).empty());
}

TEST_CASE("UUIDs and unique prefixes name only GPUs CUDA sees") {
  CHECK(visible_devices("GPU-ba22,GPU-aa", kUuids, {0, 1, 2, 3}) == std::vector<int64_t>{2, 0});
  // GPU-a names two GPUs: ambiguous, the list ends there.
  CHECK(visible_devices("GPU-bb,GPU-a,0", kUuids, {0, 1, 2, 3}) == std::vector<int64_t>{3});
  // Under a subset that hides GPU-ab11, GPU-a is unique.
  CHECK(visible_devices("GPU-a", kUuids, {0, 2}) == std::vector<int64_t>{0});
  CHECK(visible_devices("GPU-ab11", kUuids, {0, 2}).empty());
}

TEST_CASE("a MIG instance is refused with a sentence") {
  CHECK_THROWS_WITH(visible_devices("0,MIG-1234", kUuids, {0, 1}),
                    Catch::Contains("names a MIG instance (MIG-1234): muster leases whole GPUs"));
}

TEST_CASE("a lost GPU takes no CUDA ordinal: integers after it count one less") {
  // CUDA does not enumerate a GPU the driver lost (fallen off the bus).
  std::vector<muster::SeenGpu> gpus = {
      {"GPU-aa00", "", false}, {"GPU-ab11", "", true}, {"GPU-ba22", "", false}};
  CHECK(muster::cuda_devices(gpus) == std::vector<int64_t>{0, 2});
  auto v = muster::visible_gpus("1", gpus);
  REQUIRE(v);
  CHECK(*v == std::vector<int64_t>{2});
  // Unset: the two that are left, in order; the lost one is not visible.
  CHECK(muster::visible_gpus(nullptr, gpus) == std::vector<int64_t>{0, 2});
  CHECK(muster::lost_reason("lost: the GPU fell off the bus (NVML_ERROR_GPU_IS_LOST)"));
  CHECK_FALSE(muster::lost_reason("ECC errors"));
}

TEST_CASE("a UUID's 16 bytes are written as NVML and nvidia-smi write them") {
  const char bytes[16] = {'\x5a', '\x12', '\x00', '\xff', '\x01', '\x23', '\x45', '\x67',
                          '\x89', '\xab', '\xcd', '\xef', '\x10', '\x20', '\x30', '\x40'};
  CHECK(muster::gpu_uuid_text(bytes) == "GPU-5a1200ff-0123-4567-89ab-cdef10203040");
}
