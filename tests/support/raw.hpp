// Test support: one request on a raw ZeroMQ socket, for frames no client
// would send; returns the daemon's error reply.
#pragma once

#include <cstdint>
#include <string>

#include "protocol/envelope.hpp"

namespace muster::test {

// Throws std::runtime_error when no reply, or a reply that is not an error, comes back.
proto::ErrorReply raw_error_reply(const std::string& endpoint, const std::string& bytes,
                                  uint64_t* request_id = nullptr);

}  // namespace muster::test
