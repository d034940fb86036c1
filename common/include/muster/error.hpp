// Error codes that travel on the wire. The numbers are part of the protocol:
// never renumber, only append (doc/protocol.md). Public: installed with
// libmuster's headers.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace muster {

enum class ErrorCode : uint16_t {
  kOk = 0,
  kBadMessage = 1,       // not MessagePack, truncated, wrong shape or field type
  kBadVersion = 2,       // envelope carries a protocol version this side does not speak
  kUnknownType = 3,      // message type number not known
  kInvalidArgument = 4,  // well-formed but out of range (empty job id, world size 0, ...)
  kUnknownJob = 5,       // no such job on this daemon
  kNotFound = 6,         // store key absent
  kTimeout = 7,          // a wait or barrier did not complete in time
  kNoDevice = 8,         // not enough free GPUs to lease
  kConflict = 9,         // contradicts existing state (world size mismatch, rank taken)
  kPermissionDenied = 10,
  kTooLarge = 11,  // key, value or frame over the documented limits
  kInternal = 12,
  kUnavailable = 13,  // client side: no daemon answered in time
  kPeerExited = 14,   // a rank the request depends on has exited
  kShuttingDown = 15,
  kStaleGeneration = 16,  // a request from another generation than the job's
  kQuotaExceeded = 17,    // a per-job or per-uid quota (the message names its option)
  kDeviceFailed = 18,     // a GPU the job holds failed (critical XID); names the GPU
  kStorageFailed = 19,    // the change could not be made durable (disk full, I/O error)
  kRepliesDropped = 20,   // replies to this connection were dropped unread: send again
  kRestarted = 21,  // the job's coordinating daemon restarted during a broadcast: start it again
};

// Stable lower-case name, e.g. "timeout"; used in CLI output and JSON.
const char* error_name(ErrorCode code);

// The one exception type of muster: a protocol code plus a sentence for humans.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace muster
