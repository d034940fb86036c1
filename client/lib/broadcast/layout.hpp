// Where the bytes a broadcast moves live in the caller's memory: one buffer
// (muster::broadcast) or several at aligned offsets, zeros between them
// (sync_model). Streams and chunks are cut from the packed bytes; a Layout
// copies a range of them from or to the pieces. Not installed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "checksum.hpp"

// Internal to libmuster: hidden, so the version script's muster::* does not
// export it.
#pragma GCC visibility push(hidden)
namespace muster::bcast {

// One buffer of the caller at `offset` of the packed bytes.
struct Piece {
  void* data;
  size_t size;
  size_t offset;
};

class Layout {
 public:
  // pieces: in increasing offset order, not overlapping, within total.
  Layout(const std::vector<Piece>& pieces, size_t total) : pieces_(pieces), total_(total) {}

  // Bytes [o, o + n) when they lie in one piece, else null.
  const uint8_t* in_one(size_t o, size_t n) const {
    auto it = first(o);
    if (it != pieces_.end() && it->offset <= o && o + n <= it->offset + it->size)
      return static_cast<const uint8_t*>(it->data) + (o - it->offset);
    return nullptr;
  }

  // Copies bytes [o, o + n) to staging (zeros between the pieces).
  void gather(size_t o, size_t n, uint8_t* staging) const {
    std::memset(staging, 0, n);
    for (auto it = first(o); it != pieces_.end() && it->offset < o + n; ++it) {
      size_t a = std::max(o, it->offset), b = std::min(o + n, it->offset + it->size);
      if (a < b)
        std::memcpy(staging + (a - o), static_cast<const uint8_t*>(it->data) + (a - it->offset),
                    b - a);
    }
  }

  // Copies bytes [o, o + n) to dst (zeros between the pieces), hashing all
  // n bytes on the way; with cached, the stores stay in the cache.
  void copy_in(size_t o, size_t n, uint8_t* dst, Hasher& hs, bool cached) const {
    if (const uint8_t* p = in_one(o, n)) return hs.copy_update(dst, p, n, cached);
    size_t pos = o;
    auto zeros = [&](size_t a) {
      std::memset(dst + (pos - o), 0, a - pos);
      hs.update(dst + (pos - o), a - pos);
    };
    for (auto it = first(o); it != pieces_.end() && it->offset < o + n; ++it) {
      size_t a = std::max(pos, it->offset), b = std::min(o + n, it->offset + it->size);
      if (a >= b) continue;
      if (a > pos) zeros(a);
      hs.copy_update(dst + (a - o), static_cast<const uint8_t*>(it->data) + (a - it->offset), b - a,
                     cached);
      pos = b;
    }
    if (pos < o + n) zeros(o + n);
  }

  // Copies bytes [o, o + n) from src into the pieces; with hs, hashes all n
  // bytes on the way (the gaps too).
  void scatter(size_t o, const uint8_t* src, size_t n, Hasher* hs) const {
    size_t pos = o;
    for (auto it = first(o); it != pieces_.end() && it->offset < o + n; ++it) {
      size_t a = std::max(pos, it->offset), b = std::min(o + n, it->offset + it->size);
      if (a >= b) continue;
      if (hs && a > pos) hs->update(src + (pos - o), a - pos);
      auto* dst = static_cast<uint8_t*>(it->data) + (a - it->offset);
      if (hs)
        hs->copy_update(dst, src + (a - o), b - a);
      else
        std::memcpy(dst, src + (a - o), b - a);
      pos = b;
    }
    if (hs && pos < o + n) hs->update(src + (pos - o), o + n - pos);
  }

  size_t total() const { return total_; }
  const std::vector<Piece>& pieces() const { return pieces_; }

 private:
  // The first piece that ends after o.
  std::vector<Piece>::const_iterator first(size_t o) const {
    return std::upper_bound(pieces_.begin(), pieces_.end(), o,
                            [](size_t v, const Piece& p) { return v < p.offset + p.size; });
  }

  const std::vector<Piece>& pieces_;
  size_t total_;
};

}  // namespace muster::bcast
#pragma GCC visibility pop
