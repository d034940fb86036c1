#include "protocol/envelope.hpp"

#include <algorithm>

#include "protocol/bounded_unpack.hpp"
#include "protocol/limits.hpp"

namespace muster::proto {

void pack_envelope_head(codec::Packer& p, uint64_t request_id, uint16_t type, uint16_t version) {
  p.pack_array(4);
  p.pack(version);
  p.pack(request_id);
  p.pack(type);
}

namespace {
struct Counter {
  size_t n = 0;
  void write(const char*, size_t k) { n += k; }
};
struct Appender {
  std::string& s;
  void write(const char* p, size_t k) { s.append(p, k); }
};
template <class Stream>
void pack_object_frame(Stream& out, uint64_t request_id, uint16_t type,
                       const msgpack::object& payload, uint16_t version) {
  msgpack::packer<Stream> p(out);
  p.pack_array(4);
  p.pack(version);
  p.pack(request_id);
  p.pack(type);
  p.pack(payload);
}
}  // namespace

std::string encode_object(uint64_t request_id, uint16_t type, const msgpack::object& payload,
                          uint16_t version) {
  Counter size;
  pack_object_frame(size, request_id, type, payload, version);
  std::string frame;
  frame.reserve(size.n);
  Appender out{frame};
  pack_object_frame(out, request_id, type, payload, version);
  return frame;
}

std::string encode_raw(uint64_t request_id, uint16_t type, const codec::Buffer& payload,
                       uint16_t version) {
  codec::Buffer buf;
  codec::Packer p(buf);
  pack_envelope_head(p, request_id, type, version);
  std::string out(buf.data(), buf.size());
  out.append(payload.data(), payload.size());
  return out;
}

Envelope decode_envelope(const void* data, size_t size, bool reference_bins) {
  if (size == 0) throw EnvelopeError(ErrorCode::kBadMessage, "empty frame", 0);
  if (size > limits::kMaxFrameBytes)
    throw EnvelopeError(ErrorCode::kTooLarge,
                        "frame of " + std::to_string(size) + " bytes exceeds the limit of " +
                            std::to_string(limits::kMaxFrameBytes),
                        0);
  Envelope env;
  size_t offset = 0;
  // The scan bounds what msgpack allocates, in total, by the frame's size
  // before anything is allocated (bounded_unpack.hpp); the limits below
  // are a second line per container.
  codec::DecodeBudget budget{std::min(limits::kMaxFrameObjects, limits::kFreeObjects + size / 2),
                             limits::kMaxDepth};
  msgpack::unpack_limit lim(1u << 20, 1u << 16, limits::kMaxFrameBytes, limits::kMaxFrameBytes, 0,
                            limits::kMaxDepth);
  try {
    auto bins = [](msgpack::type::object_type t, size_t, void*) { return t == msgpack::type::BIN; };
    env.handle = codec::bounded_unpack(static_cast<const char*>(data), size, offset, budget,
                                       reference_bins ? +bins : nullptr, lim);
  } catch (const codec::TooManyObjects& e) {
    throw EnvelopeError(ErrorCode::kTooLarge, std::string("frame refused: ") + e.what(), 0);
  } catch (const msgpack::insufficient_bytes&) {
    throw EnvelopeError(ErrorCode::kBadMessage, "truncated MessagePack frame", 0);
  } catch (const std::exception& e) {
    throw EnvelopeError(ErrorCode::kBadMessage, std::string("not a MessagePack frame: ") + e.what(),
                        0);
  }
  if (offset != size)
    throw EnvelopeError(ErrorCode::kBadMessage, "trailing bytes after the message", 0);
  const auto& o = env.handle.get();
  if (o.type != msgpack::type::ARRAY || o.via.array.size != 4)
    throw EnvelopeError(ErrorCode::kBadMessage,
                        "envelope must be an array [version, request_id, type, payload]", 0);
  const auto* f = o.via.array.ptr;
  if (f[1].type == msgpack::type::POSITIVE_INTEGER) env.request_id = f[1].via.u64;
  if (f[0].type != msgpack::type::POSITIVE_INTEGER || f[0].via.u64 > 0xffff)
    throw EnvelopeError(ErrorCode::kBadMessage, "envelope version is not a small integer",
                        env.request_id);
  env.version = static_cast<uint16_t>(f[0].via.u64);
  if (env.version != kVersion)
    throw EnvelopeError(ErrorCode::kBadVersion,
                        "protocol version " + std::to_string(env.version) +
                            " is not supported; this side speaks version " +
                            std::to_string(kVersion),
                        env.request_id);
  if (f[1].type != msgpack::type::POSITIVE_INTEGER)
    throw EnvelopeError(ErrorCode::kBadMessage, "envelope request_id is not an integer", 0);
  if (f[2].type != msgpack::type::POSITIVE_INTEGER || f[2].via.u64 > 0xffff)
    throw EnvelopeError(ErrorCode::kBadMessage, "envelope type is not a small integer",
                        env.request_id);
  env.type = static_cast<uint16_t>(f[2].via.u64);
  if (type_name(env.type) == nullptr)
    throw EnvelopeError(ErrorCode::kUnknownType, "unknown message type " + std::to_string(env.type),
                        env.request_id);
  if (f[3].type != msgpack::type::MAP)
    throw EnvelopeError(ErrorCode::kBadMessage, "envelope payload is not a map", env.request_id);
  env.payload = f[3];
  return env;
}

std::string encode_error(uint64_t request_id, ErrorCode code, const std::string& message) {
  return encode(request_id, ErrorReply{static_cast<uint16_t>(code), message});
}

}  // namespace muster::proto
