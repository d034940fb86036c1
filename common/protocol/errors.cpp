#include "protocol/errors.hpp"

#include "protocol/names.hpp"

namespace muster {

namespace {
// By value of ErrorCode.
constexpr const char* kErrorNames[] = {
    "ok",
    "bad_message",
    "bad_version",
    "unknown_type",
    "invalid_argument",
    "unknown_job",
    "not_found",
    "timeout",
    "no_device",
    "conflict",
    "permission_denied",
    "too_large",
    "internal",
    "unavailable",
    "peer_exited",
    "shutting_down",
    "stale_generation",
    "quota_exceeded",
    "device_failed",
    "storage_failed",
    "replies_dropped",
    "restarted",
};
static_assert(proto::names_all(kErrorNames, ErrorCode::kRestarted));
}  // namespace

const char* error_name(ErrorCode code) {
  return proto::name_in(kErrorNames, code, "unknown_error");
}

}  // namespace muster
