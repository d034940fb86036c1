#include "protocol/bounded_unpack.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace muster::codec {

namespace {

uint64_t be(const char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// One header: how many bytes it takes, how many bytes of payload follow it
// (str, bin, scalars) and how many items it opens (array, map: 2 per entry).
struct Header {
  size_t head = 1;
  uint64_t skip = 0;
  uint64_t items = 0;
  bool container = false;
};

Header read_header(const char* p, size_t left) {
  auto b = static_cast<uint8_t>(p[0]);
  auto sized = [&](size_t n) {
    if (left < 1 + n) throw msgpack::insufficient_bytes("insufficient bytes");
    return be(p + 1, n);
  };
  Header h;
  if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return h;
  if (b >= 0xa0 && b <= 0xbf) return h.skip = b & 0x1f, h;
  if ((b >= 0x80 && b <= 0x8f) || (b >= 0x90 && b <= 0x9f)) {
    h.container = true;
    h.items = b < 0x90 ? 2u * (b & 0x0f) : (b & 0x0f);
    return h;
  }
  // Scalars of a fixed size: float 32 and 64, then uint and int 8 to 64.
  if (b == 0xca || b == 0xcb) return h.skip = b == 0xca ? 4 : 8, h;
  if (b >= 0xcc && b <= 0xd3) return h.skip = size_t{1} << ((b - 0xcc) % 4), h;
  // bin 8/16/32 and str 8/16/32: a length of 1, 2 or 4 bytes, then the bytes.
  if ((b >= 0xc4 && b <= 0xc6) || (b >= 0xd9 && b <= 0xdb)) {
    size_t n = size_t{1} << (b <= 0xc6 ? b - 0xc4 : b - 0xd9);
    h.head = 1 + n;
    h.skip = sized(n);
    return h;
  }
  // array 16/32 and map 16/32: a count of 2 or 4 bytes (a map's entries
  // are two items each).
  if (b >= 0xdc && b <= 0xdf) {
    size_t n = b == 0xdc || b == 0xde ? 2 : 4;
    h.head = 1 + n;
    h.container = true;
    h.items = sized(n) * (b >= 0xde ? 2 : 1);
    return h;
  }
  if (b == 0xc1) throw msgpack::parse_error("parse error");
  throw msgpack::ext_size_overflow("ext size overflow");  // ext: never used
}

}  // namespace

size_t scan_objects(const char* data, size_t size, size_t offset, const DecodeBudget& budget) {
  // Items still to read in each open container; the bottom entry is the root.
  std::vector<uint64_t> open{1};
  open.reserve(budget.max_depth + 2);
  size_t objects = 1, at = offset;
  while (!open.empty()) {
    if (open.back() == 0) {
      open.pop_back();
      continue;
    }
    if (at >= size) throw msgpack::insufficient_bytes("insufficient bytes");
    --open.back();
    Header h = read_header(data + at, size - at);
    at += h.head;
    if (h.skip > size - at) throw msgpack::insufficient_bytes("insufficient bytes");
    at += h.skip;
    if (!h.container || h.items == 0) continue;
    // Every item takes at least one byte: a count beyond what is left is a
    // lie, refused before anything is allocated for it.
    if (h.items > size - at) throw msgpack::insufficient_bytes("insufficient bytes");
    if (open.size() > budget.max_depth + 1)
      throw msgpack::depth_size_overflow("depth size overflow");
    if (h.items > budget.max_objects - objects)
      throw TooManyObjects(std::to_string(size - offset) + " bytes would decode to more than " +
                           std::to_string(budget.max_objects) + " MessagePack objects");
    objects += h.items;
    open.push_back(h.items);
  }
  return objects;
}

msgpack::object_handle bounded_unpack(const char* data, size_t size, size_t& offset,
                                      const DecodeBudget& budget,
                                      msgpack::unpack_reference_func reference,
                                      const msgpack::unpack_limit& limit) {
  scan_objects(data, size, offset, budget);
  return msgpack::unpack(data, size, offset, reference, nullptr, limit);
}

}  // namespace muster::codec
