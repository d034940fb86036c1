#include "protocol/codec.hpp"

#include <limits>

namespace muster::codec {

MapReader::MapReader(const msgpack::object& obj, std::string_view what) : what_(what) {
  if (obj.type != msgpack::type::MAP)
    throw Error(ErrorCode::kBadMessage, what_ + ": payload is not a map");
  map_ = &obj.via.map;
}

const msgpack::object* MapReader::find(std::string_view name) const {
  for (uint32_t i = 0; i < map_->size; ++i) {
    const auto& k = map_->ptr[i].key;
    if (k.type == msgpack::type::STR && std::string_view(k.via.str.ptr, k.via.str.size) == name)
      return &map_->ptr[i].val;
  }
  return nullptr;
}

void MapReader::fail(std::string_view name, std::string_view why) const {
  throw Error(ErrorCode::kBadMessage, what_ + "." + std::string(name) + ": " + std::string(why));
}

const msgpack::object& MapReader::need(std::string_view name) const {
  const auto* o = find(name);
  if (!o) fail(name, "required field is missing");
  return *o;
}

std::string_view MapReader::bytes(std::string_view name, size_t max_bytes, bool binary) const {
  const auto& o = need(name);
  if (o.type != (binary ? msgpack::type::BIN : msgpack::type::STR))
    fail(name, binary ? "expected binary data" : "expected a string");
  auto v = binary ? std::string_view(o.via.bin.ptr, o.via.bin.size)
                  : std::string_view(o.via.str.ptr, o.via.str.size);
  if (v.size() > max_bytes)
    throw Error(ErrorCode::kTooLarge,
                what_ + "." + std::string(name) + " of " + std::to_string(v.size()) +
                    (binary ? " bytes is larger than " : " bytes is longer than ") +
                    std::to_string(max_bytes) +
                    " bytes, the protocol's limit for it (no option raises it)");
  return v;
}

std::string MapReader::str(std::string_view name, size_t max_bytes) const {
  return std::string(bytes(name, max_bytes, false));
}

std::string_view MapReader::str_view(std::string_view name, size_t max_bytes) const {
  return bytes(name, max_bytes, false);
}

std::string MapReader::bin(std::string_view name, size_t max_bytes) const {
  return std::string(bytes(name, max_bytes, true));
}

std::string_view MapReader::bin_view(std::string_view name, size_t max_bytes) const {
  return bytes(name, max_bytes, true);
}

bool MapReader::boolean(std::string_view name) const {
  const auto& o = need(name);
  if (o.type != msgpack::type::BOOLEAN) fail(name, "expected a boolean");
  return o.via.boolean;
}

int64_t as_int(const msgpack::object& o, std::string_view what, int64_t min, int64_t max) {
  int64_t v;
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error(ErrorCode::kInvalidArgument, std::string(what) + " is out of range");
    v = static_cast<int64_t>(o.via.u64);
  } else if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    v = o.via.i64;
  } else {
    throw Error(ErrorCode::kBadMessage, std::string(what) + ": expected an integer");
  }
  if (v < min || v > max)
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + " = " + std::to_string(v) +
                                                 " is outside [" + std::to_string(min) + ", " +
                                                 std::to_string(max) + "]");
  return v;
}

uint64_t MapReader::u64(std::string_view name, uint64_t min, uint64_t max) const {
  const auto& o = need(name);
  if (o.type != msgpack::type::POSITIVE_INTEGER) fail(name, "expected a non-negative integer");
  if (o.via.u64 < min || o.via.u64 > max)
    throw Error(ErrorCode::kInvalidArgument,
                what_ + "." + std::string(name) + " = " + std::to_string(o.via.u64) +
                    " is outside [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return o.via.u64;
}

int64_t MapReader::i64(std::string_view name, int64_t min, int64_t max) const {
  return as_int(need(name), what_ + "." + std::string(name), min, max);
}

double MapReader::f64(std::string_view name) const {
  const auto& o = need(name);
  if (o.type == msgpack::type::FLOAT64 || o.type == msgpack::type::FLOAT32) return o.via.f64;
  if (o.type == msgpack::type::POSITIVE_INTEGER) return static_cast<double>(o.via.u64);
  fail(name, "expected a number");
}

const msgpack::object_array& MapReader::array(std::string_view name, size_t max_items) const {
  const auto& o = need(name);
  if (o.type != msgpack::type::ARRAY) fail(name, "expected an array");
  if (o.via.array.size > max_items)
    throw Error(ErrorCode::kTooLarge, what_ + "." + std::string(name) + " has more than " +
                                          std::to_string(max_items) + " items");
  return o.via.array;
}

const msgpack::object& MapReader::map(std::string_view name) const {
  const auto& o = need(name);
  if (o.type != msgpack::type::MAP) fail(name, "expected a map");
  return o;
}

std::vector<std::string> MapReader::str_list(std::string_view name, size_t max_items,
                                             size_t max_bytes) const {
  const auto& arr = array(name, max_items);
  std::vector<std::string> out;
  out.reserve(arr.size);
  for (uint32_t i = 0; i < arr.size; ++i) {
    const auto& o = arr.ptr[i];
    if (o.type != msgpack::type::STR) fail(name, "expected an array of strings");
    if (o.via.str.size > max_bytes)
      throw Error(ErrorCode::kTooLarge, what_ + "." + std::string(name) + " has an item over " +
                                            std::to_string(max_bytes) + " bytes");
    out.emplace_back(o.via.str.ptr, o.via.str.size);
  }
  return out;
}

std::vector<int64_t> MapReader::int_list(std::string_view name, size_t max_items, int64_t min,
                                         int64_t max) const {
  const auto& arr = array(name, max_items);
  std::vector<int64_t> out;
  out.reserve(arr.size);
  for (uint32_t i = 0; i < arr.size; ++i)
    out.push_back(as_int(arr.ptr[i], what_ + "." + std::string(name) + "[]", min, max));
  return out;
}

}  // namespace muster::codec
