// Hard limits the decoder enforces, so that no request can make the daemon
// allocate without bound. Documented in doc/protocol.md.
#pragma once

#include <cstddef>
#include <cstdint>

namespace muster::limits {

// A store value: what programs put in torch's TCPStore (pickled objects,
// large configs) fits, up to 64 MiB (TCPStore has no limit of its own);
// each counts against its job's store quota (--max-store-bytes).
inline constexpr size_t kMaxValueBytes = 64u << 20;
// One value with its key and envelope, and a node daemon's wrapping of
// that frame when it forwards it.
inline constexpr size_t kMaxFrameBytes = kMaxValueBytes + (1u << 20);  // also ZMQ_MAXMSGSIZE
// A job's key on a daemon (job_id.hpp job_key: its name, '~' and its
// owner's uid) is at most kMaxJobIdBytes; the name a user gives leaves room
// for the longest uid (10 digits) and the '~'.
inline constexpr size_t kMaxJobIdBytes = 128;
inline constexpr size_t kMaxJobNameBytes = kMaxJobIdBytes - 11;
// Names: barriers, communicators, counters.
inline constexpr size_t kMaxKeyBytes = 1024;
// A store key (TCPStore has no limit; keys that name files or carry
// reprs pass), and all the keys of one request (a wait, multi_get) at
// most kMaxStoreKeysBytes together, which bounds what a parked wait holds.
inline constexpr size_t kMaxStoreKeyBytes = 64u << 10;
inline constexpr size_t kMaxStoreKeysBytes = 1u << 20;
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
