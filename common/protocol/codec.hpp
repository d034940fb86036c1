// Thin layer over msgpack-c: a packer for building payload maps and a
// validating reader for decoding them. The only file that knows msgpack's API
// besides codec.cpp.
#pragma once

#include <msgpack.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/errors.hpp"

namespace muster::codec {

using Buffer = msgpack::sbuffer;
using Packer = msgpack::packer<msgpack::sbuffer>;

inline void put_str(Packer& p, std::string_view s) {
  p.pack_str(static_cast<uint32_t>(s.size()));
  p.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}
inline void put_bin(Packer& p, std::string_view s) {
  p.pack_bin(static_cast<uint32_t>(s.size()));
  p.pack_bin_body(s.data(), static_cast<uint32_t>(s.size()));
}
inline void key(Packer& p, std::string_view k) {
  put_str(p, k);
}

// Reads one msgpack map; every accessor checks type and range and throws
// Error(kBadMessage / kTooLarge / kInvalidArgument) naming the field.
class MapReader {
 public:
  MapReader(const msgpack::object& obj, std::string_view what);

  const std::string& what() const { return what_; }
  bool has(std::string_view name) const { return find(name) != nullptr; }
  std::string str(std::string_view name, size_t max_bytes) const;
  // The same, without a copy: valid while the object's memory is.
  std::string_view str_view(std::string_view name, size_t max_bytes) const;
  std::string bin(std::string_view name, size_t max_bytes) const;
  // The same, without a copy: valid while the object's memory is.
  std::string_view bin_view(std::string_view name, size_t max_bytes) const;
  bool boolean(std::string_view name) const;
  uint64_t u64(std::string_view name, uint64_t min, uint64_t max) const;
  int64_t i64(std::string_view name, int64_t min, int64_t max) const;
  double f64(std::string_view name) const;
  std::vector<std::string> str_list(std::string_view name, size_t max_items,
                                    size_t max_bytes) const;
  std::vector<int64_t> int_list(std::string_view name, size_t max_items, int64_t min,
                                int64_t max) const;
  // For nested arrays of maps (status): the array object, type-checked.
  const msgpack::object_array& array(std::string_view name, size_t max_items) const;
  // A nested map, type-checked (read it with a MapReader of its own).
  const msgpack::object& map(std::string_view name) const;

 private:
  const msgpack::object* find(std::string_view name) const;
  const msgpack::object& need(std::string_view name) const;
  // A string's or binary field's bytes, in place.
  std::string_view bytes(std::string_view name, size_t max_bytes, bool binary) const;
  [[noreturn]] void fail(std::string_view name, std::string_view why) const;

  const msgpack::object_map* map_;
  std::string what_;
};

int64_t as_int(const msgpack::object& o, std::string_view what, int64_t min, int64_t max);

}  // namespace muster::codec
