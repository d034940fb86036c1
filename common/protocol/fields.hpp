// How a message's field list is walked. Each message names its fields once,
// in wire order, in a member template
//
//   template <class IO> void fields(IO& io) {
//     io.job(job);
//     io.num("local_world_size", local_world_size, 1, limits::kMaxLocalWorldSize);
//     io.num("local_rank", local_rank, -1, local_world_size - 1);
//   }
//
// that pack_fields walks twice (a counting BasicWriter sizes the map, then a
// packing one writes it) and read_fields once with a Reader, which reads and
// checks each field in list order, so that a range may depend on a field
// listed before it. Both are flattened into the message's pack() and
// unpack(): no allocation or indirect call per field, and the count folds to
// a constant or a few tests. Only the message codecs include this.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "protocol/codec.hpp"
#include "protocol/limits.hpp"

namespace muster::proto::wire {

// Whether a field may be missing from a map.
enum class Presence : uint8_t {
  kRequired,
  // Always written; a peer from before the field was added leaves it out,
  // and then the member keeps its default.
  kAddedLater,
  // Written only when it is not its type's default (or empty optional), so
  // that the frame stays the one older peers know; absent reads as default.
  kUnlessDefault,
};
using enum Presence;

// The bounds of an integer field: as wide as its type's signedness allows.
template <class T>
using Bound = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;

// Job ids appear in logs, status tables and file names: printable, bounded,
// not empty. Throws kInvalidArgument.
void check_job_id(const std::string& id);
void check_store_key(const std::string& key);
// Each key as check_store_key, and at most kMaxStoreKeysBytes together.
void check_store_keys(const std::vector<std::string>& keys);

// Fields that have the same key and checks in every message that has them;
// IO is the Reader or the Writer.
template <class IO>
class Kinds {
 public:
  void job(std::string& id) {
    io().str("job", id, limits::kMaxJobIdBytes);
    io().check([&] { check_job_id(id); });
  }
  void store_key(std::string& key) {
    io().str("key", key, limits::kMaxStoreKeyBytes);
    io().check([&] { check_store_key(key); });
  }
  void pid(std::string_view name, int64_t& pid) { io().num(name, pid, 1, limits::kMaxPid); }
  void ms(std::string_view name, int64_t& ms) { io().num(name, ms, 0, limits::kMaxTimeoutMs); }
  void generation(uint64_t& g) { io().num("generation", g, 0, UINT64_MAX); }
  // The generation fence of store requests and barriers (GenerationFence).
  void fence(std::optional<uint64_t>& generation) {
    io().num("generation", generation, 0, UINT64_MAX, kUnlessDefault);
  }

 private:
  IO& io() { return static_cast<IO&>(*this); }
};

// Packs a message's fields as one map.
template <class M>
void pack_fields(codec::Packer& p, const M& m, std::optional<size_t> tail_bytes = std::nullopt);
// Reads a message's fields from one map; what names it in errors.
template <class M>
M read_fields(const msgpack::object& o, std::string_view what);

// Packs a field list; as a counter (kCounting), only counts the map entries
// it would pack.
template <bool kCounting>
class BasicWriter : public Kinds<BasicWriter<kCounting>> {
 public:
  // With tail_bytes, tail() writes only the header of a binary field of that
  // many bytes, which the caller then writes itself.
  explicit BasicWriter(codec::Packer* p, std::optional<size_t> tail_bytes = std::nullopt)
      : p_(p), tail_bytes_(tail_bytes) {}
  uint32_t count() const { return n_; }

  template <class T>
  void num(std::string_view name, const T& v, Bound<T>, Bound<T>, Presence pr = kRequired) {
    if (put(name, pr, v != T{})) p_->pack(v);
  }
  template <class T>
  void num(std::string_view name, const std::optional<T>& v, Bound<T>, Bound<T>,
           Presence pr = kRequired) {
    if (put(name, pr, v.has_value())) p_->pack(*v);
  }
  void boolean(std::string_view name, bool v, Presence pr = kRequired) {
    if (put(name, pr, v)) p_->pack(v);
  }
  void real(std::string_view name, double v) {
    if (put(name, kRequired, true)) p_->pack(v);
  }
  void str(std::string_view name, std::string_view v, size_t, Presence pr = kRequired) {
    if (put(name, pr, !v.empty())) codec::put_str(*p_, v);
  }
  void bin(std::string_view name, std::string_view v, size_t) {
    if (put(name, kRequired, true)) codec::put_bin(*p_, v);
  }
  // A binary field that comes last, so that its bytes may follow a head.
  void tail(std::string_view name, std::string_view v, size_t) {
    if (!put(name, kRequired, true)) return;
    if (!tail_bytes_) return codec::put_bin(*p_, v);
    p_->pack_bin(static_cast<uint32_t>(*tail_bytes_));
  }
  void ints(std::string_view name, const std::vector<int64_t>& v, size_t, int64_t, int64_t,
            Presence pr = kRequired) {
    if (!put(name, pr, !v.empty())) return;
    p_->pack_array(static_cast<uint32_t>(v.size()));
    for (auto x : v) p_->pack(x);
  }
  void strs(std::string_view name, const std::vector<std::string>& v, size_t, size_t,
            Presence pr = kRequired) {
    if (!put(name, pr, !v.empty())) return;
    p_->pack_array(static_cast<uint32_t>(v.size()));
    for (const auto& s : v) codec::put_str(*p_, s);
  }
  // An array of maps, each item with a field list of its own.
  template <class T>
  void list(std::string_view name, const std::vector<T>& v, size_t, Presence pr = kRequired) {
    if (!put(name, pr, !v.empty())) return;
    p_->pack_array(static_cast<uint32_t>(v.size()));
    for (const auto& item : v) pack_fields(*p_, item);
  }
  // Checks and defaults concern the reader only.
  template <class F>
  void check(F&&) {}
  template <class T>
  void if_absent(T&, const T&) {}

 private:
  // Whether the field's value is to be packed now (its key is then written).
  bool put(std::string_view name, Presence pr, bool not_default) {
    if (pr == kUnlessDefault && !not_default) return false;
    if constexpr (kCounting) {
      ++n_;
      return false;
    }
    codec::key(*p_, name);
    return true;
  }

  codec::Packer* p_;
  std::optional<size_t> tail_bytes_;
  uint32_t n_ = 0;
};

template <class M>
[[gnu::flatten]] void pack_fields(codec::Packer& p, const M& m, std::optional<size_t> tail_bytes) {
  // fields() reads and writes members alike; a writer only reads them.
  auto& fields = const_cast<M&>(m);
  BasicWriter<true> counter(nullptr);
  fields.fields(counter);
  p.pack_map(counter.count());
  BasicWriter<false> writer(&p, tail_bytes);
  fields.fields(writer);
}

// Reads and checks a field list from one map. Errors name the field as
// "<what>.<name>" and keep MapReader's codes and sentences.
class Reader : public Kinds<Reader> {
 public:
  Reader(const msgpack::object& o, std::string_view what) : r_(o, what) {}

  template <class T>
  void num(std::string_view name, T& v, Bound<T> min, Bound<T> max, Presence pr = kRequired) {
    if (absent(name, pr)) return;
    if constexpr (std::is_signed_v<T>)
      v = static_cast<T>(r_.i64(name, min, max));
    else
      v = static_cast<T>(r_.u64(name, min, max));
  }
  template <class T>
  void num(std::string_view name, std::optional<T>& v, Bound<T> min, Bound<T> max,
           Presence pr = kRequired) {
    if (absent(name, pr)) return;
    T x{};
    num(name, x, min, max);
    v = x;
  }
  void boolean(std::string_view name, bool& v, Presence pr = kRequired) {
    if (!absent(name, pr)) v = r_.boolean(name);
  }
  void real(std::string_view name, double& v) { v = r_.f64(name); }
  void str(std::string_view name, std::string& v, size_t max_bytes, Presence pr = kRequired) {
    if (!absent(name, pr)) v = r_.str_view(name, max_bytes);
  }
  void bin(std::string_view name, std::string& v, size_t max_bytes) {
    v = r_.bin_view(name, max_bytes);
  }
  // In place: the view points into the decoded frame.
  void bin(std::string_view name, std::string_view& v, size_t max_bytes) {
    v = r_.bin_view(name, max_bytes);
  }
  template <class S>
  void tail(std::string_view name, S& v, size_t max_bytes) {
    bin(name, v, max_bytes);
  }
  void ints(std::string_view name, std::vector<int64_t>& v, size_t max_items, int64_t min,
            int64_t max, Presence pr = kRequired) {
    if (!absent(name, pr)) v = r_.int_list(name, max_items, min, max);
  }
  void strs(std::string_view name, std::vector<std::string>& v, size_t max_items, size_t max_bytes,
            Presence pr = kRequired) {
    if (!absent(name, pr)) v = r_.str_list(name, max_items, max_bytes);
  }
  template <class T>
  void list(std::string_view name, std::vector<T>& v, size_t max_items, Presence pr = kRequired) {
    if (absent(name, pr)) return;
    const auto& items = r_.array(name, max_items);
    const std::string what = r_.what() + "." + std::string(name) + "[]";
    v.clear();
    for (uint32_t i = 0; i < items.size; ++i) v.push_back(read_fields<T>(items.ptr[i], what));
  }
  template <class F>
  void check(F&& f) {
    f();
  }
  // The value v has when the field that reads it next is absent.
  template <class T>
  void if_absent(T& v, const T& value) {
    v = value;
  }

 private:
  bool absent(std::string_view name, Presence pr) const { return pr != kRequired && !r_.has(name); }

  codec::MapReader r_;
};

template <class M>
[[gnu::flatten]] M read_fields(const msgpack::object& o, std::string_view what) {
  Reader r(o, what);
  M m{};
  m.fields(r);
  return m;
}

}  // namespace muster::proto::wire

namespace muster::proto {

// The upper bound of the u32 fields the message files walk.
inline constexpr uint32_t kU32Max = 0xffffffffu;
// A request that names a job and may carry a generation fence: the job
// first, its own fields, the fence last.
template <class IO, class M, class F>
void fenced(IO& io, M& m, F&& own) {
  io.job(m.job);
  own();
  io.fence(m.generation);
}
}  // namespace muster::proto

// Defines M::pack() and M::unpack() over M::fields(); errors name the
// message by its row in the message table. For a class template, Head is
// its template head and M names it with its parameters.
#define MUSTER_CODEC_OF(Head, M)                                             \
  Head void M::pack(codec::Packer& p) const {                                \
    wire::pack_fields(p, *this);                                             \
  }                                                                          \
  Head M M::unpack(const msgpack::object& o) {                               \
    static const char* const what = type_name(static_cast<uint16_t>(kType)); \
    return wire::read_fields<M>(o, what);                                    \
  }
#define MUSTER_CODEC(M) MUSTER_CODEC_OF(, M)
