// The envelope around every message: a MessagePack array
// [version, request_id, type, payload-map] in one ZeroMQ frame.
#pragma once

#include <cstdint>
#include <string>

#include "protocol/errors.hpp"
#include "protocol/messages.hpp"

namespace muster::proto {

struct Envelope {
  uint16_t version = 0;
  uint64_t request_id = 0;
  uint16_t type = 0;
  msgpack::object_handle handle;  // owns the memory payload points into
  msgpack::object payload;
};

// Thrown by decode_envelope; request_id is set whenever the frame got far
// enough to carry one, so that the error reply can be matched.
struct EnvelopeError : Error {
  EnvelopeError(ErrorCode c, const std::string& m, uint64_t rid) : Error(c, m), request_id(rid) {}
  uint64_t request_id;
};

std::string encode_raw(uint64_t request_id, uint16_t type, const codec::Buffer& payload,
                       uint16_t version = kVersion);

// The envelope's first three items; the payload map must follow in the same
// buffer (frames written in one pass, bulk bytes copied once).
void pack_envelope_head(codec::Packer& p, uint64_t request_id, uint16_t type,
                        uint16_t version = kVersion);

template <class M>
std::string encode(uint64_t request_id, const M& msg) {
  codec::Buffer buf;
  codec::Packer p(buf);
  msg.pack(p);
  return encode_raw(request_id, static_cast<uint16_t>(M::kType), buf);
}

// A decoded payload in a new envelope (relaying a request or its reply),
// written in one pass into a string of the exact size.
std::string encode_object(uint64_t request_id, uint16_t type, const msgpack::object& payload,
                          uint16_t version = kVersion);

// Validates shape, limits and version; never trusts a size it has not checked.
// With reference_bins, binary fields point into data (no copy), which must
// then outlive the envelope.
Envelope decode_envelope(const void* data, size_t size, bool reference_bins = false);

std::string encode_error(uint64_t request_id, ErrorCode code, const std::string& message);

}  // namespace muster::proto
