// Hard limits the decoder enforces, so that no request can make the daemon
// allocate without bound. Documented in doc/protocol.md.
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
// "GPU-" or "MIG-" and a UUID (40 bytes), with room to spare.
inline constexpr size_t kMaxDeviceUuidBytes = 96;
inline constexpr int64_t kMaxPid = int64_t{1} << 22;  // Linux's pid_max ceiling
inline constexpr int64_t kMaxTimeoutMs = 24LL * 3600 * 1000;
inline constexpr size_t kMaxDepth = 8;
// What one frame may decode to (protocol/bounded_unpack.hpp), counted in
// msgpack objects of 24 bytes: at most kFreeObjects plus one per 2 bytes
// of the frame, and never more than kMaxFrameObjects (24 MiB). The largest
// legitimate frames stay well inside: a heartbeat ack for 65,536 jobs is
// ~590,000 objects, a status reply ~100 per job of 8 ranks; lists of
// small integers (devices, 1 byte each) hold at most 4,096 items.
inline constexpr size_t kFreeObjects = 1u << 16;
inline constexpr size_t kMaxFrameObjects = 1u << 20;

}  // namespace muster::limits
