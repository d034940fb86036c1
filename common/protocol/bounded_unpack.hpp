// MessagePack decoding whose memory is bounded by the bytes it was given.
// msgpack-c allocates a container's objects when it reads the container's
// header (24 bytes each), before its items arrive, and its unpack_limit
// bounds each container, not their sum: a 60 MiB frame of nils once
// decoded to 1.5 GB. So a scan walks the headers first (no allocation),
// checks that every container's item count fits in the bytes left (an
// item takes at least one byte) and that the whole frame decodes to at
// most a budget of objects; only then does msgpack-c unpack it.
#pragma once

#include <cstddef>
#include <stdexcept>

#include <msgpack.hpp>

namespace muster::codec {

// What a decode may cost: objects counts msgpack::objects (the root, each
// array item, each map key and value); depth counts nested containers.
struct DecodeBudget {
  size_t max_objects;
  size_t max_depth;
};

// A frame that would decode to more objects than its budget allows.
struct TooManyObjects : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Walks the MessagePack value at data[offset..size) without allocating
// and returns how many objects it decodes to. Throws TooManyObjects over
// the budget, msgpack::insufficient_bytes when a header promises more than
// is left, and other msgpack exceptions (depth, ext, parse error) as
// msgpack-c would. Its work is bounded by the budget, not by the size.
size_t scan_objects(const char* data, size_t size, size_t offset, const DecodeBudget& budget);

// scan_objects, then msgpack::unpack with `limit` (which must not allow
// ext types: the scan refuses them).
msgpack::object_handle bounded_unpack(const char* data, size_t size, size_t& offset,
                                      const DecodeBudget& budget,
                                      msgpack::unpack_reference_func reference,
                                      const msgpack::unpack_limit& limit);

}  // namespace muster::codec
