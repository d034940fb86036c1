#include "muster/error.hpp"

namespace muster {

const char* error_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kBadMessage:
      return "bad_message";
    case ErrorCode::kBadVersion:
      return "bad_version";
    case ErrorCode::kUnknownType:
      return "unknown_type";
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kUnknownJob:
      return "unknown_job";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kNoDevice:
      return "no_device";
    case ErrorCode::kConflict:
      return "conflict";
    case ErrorCode::kPermissionDenied:
      return "permission_denied";
    case ErrorCode::kTooLarge:
      return "too_large";
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kPeerExited:
      return "peer_exited";
    case ErrorCode::kShuttingDown:
      return "shutting_down";
    case ErrorCode::kStaleGeneration:
      return "stale_generation";
  }
  return "unknown_error";
}

}  // namespace muster
