// Checksums of the bytes a broadcast moves (see broadcast.cpp): each 4 MiB
// chunk of a segment or pool gets one, and readers verify every chunk.
//
// Algorithms 1 and 3 run four independent lanes over 32-byte groups (so
// the CPU overlaps them), then mix the lanes, the tail bytes and the
// length. Algorithm 1 runs crc32c (SSE4.2) in the lanes, algorithm 3 (the
// default) a 32x32-bit product of each keyed word plus its neighbour word,
// summed twice (Fletcher-style, so the order of the groups counts): four
// lanes of it fit one AVX2 register, and a copy that checksums costs about
// what a plain copy does, where crc32c's one instruction per 8 bytes nearly
// doubles a reader's time. Algorithm 4 is libxxhash's XXH3 (64 bits), not
// fused with the copy; 2 was a hand-written xxhash64-style round, retired
// for it. The metadata names the algorithm used, readers follow it. Not
// installed.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t by value: no allocation a Hasher
#include <xxhash.h>

#include "muster/error.hpp"

// Internal to libmuster: hidden, so the version script's muster::* does not
// export it.
#pragma GCC visibility push(hidden)
namespace muster::bcast {

constexpr size_t kChunk = size_t{4} << 20;    // checksum granularity
constexpr size_t kBlock = size_t{256} << 10;  // hash, then copy while still in cache

enum Algo : uint32_t { kCrc32c = 1, kMulSum = 3, kXxh3 = 4 };

constexpr bool known_algo(uint32_t a) {
  return a == kCrc32c || a == kMulSum || a == kXxh3;
}

using BulkFn = void (*)(uint64_t* lanes, const uint8_t* p, size_t n);  // n % 32 == 0

// Copies n bytes (n % 32 == 0) and runs the lanes over them in one pass:
// the bytes are read once, and the stores bypass the cache when dst allows,
// unless `cached`.
using CopyFn = void (*)(uint64_t* lanes, uint8_t* dst, const uint8_t* src, size_t n, bool cached);

// The algorithm a publisher uses: mulsum. MUSTER_CHECKSUM=crc32c|xxh3|
// mulsum overrides (benchmarks, tests of the others; mul64, the old name,
// means xxh3).
Algo preferred_algo();

// Streaming hash: update() with any split of the bytes gives the same value.
class Hasher {
 public:
  // portable: no SIMD code, whatever the CPU has (tests compare the two).
  explicit Hasher(Algo a, bool portable = false);
  void reset();
  void update(const uint8_t* p, size_t n);
  // memcpy(dst, src, n) and update(src, n); with cached, the stores stay in
  // the cache (for readers close behind).
  void copy_update(uint8_t* dst, const uint8_t* src, size_t n, bool cached = false);
  uint64_t final() const;

 private:
  Algo algo_;
  BulkFn bulk_;
  CopyFn copy_;
  std::array<uint64_t, 8> lanes_{};  // mulsum: 4 sums, then 4 sums of sums
  XXH3_state_t xxh3_;                // kXxh3's whole state (no lanes)
  uint8_t pend_[32];
  size_t npend_ = 0;
  uint64_t total_ = 0;
};

// Checksums of the consecutive chunks of one segment, fed in order. With
// `expected`, each finished chunk is compared and a mismatch throws.
class ChunkSums {
 public:
  ChunkSums(Algo a, size_t chunk, const std::vector<uint64_t>* expected = nullptr,
            std::string what = {})
      : h_(a), chunk_(chunk), expected_(expected), what_(std::move(what)) {}
  void feed(const void* data, size_t n) {
    auto* p = static_cast<const uint8_t*>(data);
    while (n) {
      size_t k = std::min(n, chunk_ - pos_ % chunk_);
      h_.update(p, k);
      pos_ += k, p += k, n -= k;
      if (pos_ % chunk_ == 0) close();
    }
  }
  // Copies n bytes from src to dst, feeding them.
  void copy_feed(void* dst, const void* src, size_t n) {
    auto* d = static_cast<uint8_t*>(dst);
    auto* p = static_cast<const uint8_t*>(src);
    while (n) {
      size_t k = std::min(n, chunk_ - pos_ % chunk_);
      h_.copy_update(d, p, k);
      pos_ += k, d += k, p += k, n -= k;
      if (pos_ % chunk_ == 0) close();
    }
  }
  // Feeds n zero bytes.
  void feed_zeros(size_t n) {
    static const uint8_t zeros[4096] = {};
    for (; n; n -= std::min(n, sizeof zeros)) feed(zeros, std::min(n, sizeof zeros));
  }
  size_t pos() const { return pos_; }
  // Ends the last, partial chunk; returns the sums when writing.
  std::vector<uint64_t> finish() {
    if (pos_ % chunk_) close();
    if (expected_ && index_ != expected_->size()) fail("has the wrong number of chunks");
    return std::move(sums_);
  }

 private:
  void close() {
    uint64_t v = h_.final();
    h_.reset();
    if (expected_) {
      if (index_ >= expected_->size() || (*expected_)[index_] != v)
        fail("chunk " + std::to_string(index_) + " (from byte " + std::to_string(index_ * chunk_) +
             ") does not match its checksum: the shared memory segment was changed or damaged");
    } else {
      sums_.push_back(v);
    }
    ++index_;
  }
  [[noreturn]] void fail(const std::string& s) {
    throw Error(ErrorCode::kInternal, what_ + ": " + s);
  }
  Hasher h_;
  size_t chunk_;
  size_t pos_ = 0;
  size_t index_ = 0;
  const std::vector<uint64_t>* expected_;
  std::string what_;
  std::vector<uint64_t> sums_;
};

// XXH3 of n bytes (names, signatures: nothing a copy carries).
uint64_t hash_bytes(const void* p, size_t n);

}  // namespace muster::bcast
#pragma GCC visibility pop
