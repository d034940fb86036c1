// Hard limits the decoder enforces, so that no request can make the daemon
// allocate without bound. Documented in PROTOCOL.md.
#pragma once

#include <cstddef>
#include <cstdint>

namespace muster::limits {

inline constexpr size_t kMaxFrameBytes = 64u << 20;  // also set as ZMQ_MAXMSGSIZE
inline constexpr size_t kMaxJobIdBytes = 128;
inline constexpr size_t kMaxKeyBytes = 1024;
inline constexpr size_t kMaxValueBytes = 16u << 20;
inline constexpr size_t kMaxWaitKeys = 1024;
inline constexpr uint32_t kMaxLocalWorldSize = 4096;
inline constexpr uint32_t kMaxDevices = 4096;
inline constexpr int64_t kMaxPid = int64_t{1} << 22;  // Linux's pid_max ceiling
inline constexpr int64_t kMaxTimeoutMs = 24LL * 3600 * 1000;
inline constexpr size_t kMaxDepth = 8;

}  // namespace muster::limits
