// Chunk checksums (see checksum.hpp), with the CPU dispatch of
// their lanes: mulsum in AVX2 and crc32c in hardware (SSE4.2), each fused
// with a non-temporal copy (AVX2) where the CPU has it, else portable code.
#include "checksum.hpp"

#include <cstdlib>
#include <cstring>
#include <string_view>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace muster::bcast {
namespace {

// The lanes' seeds and final mix (xxhash64's primes; the lanes' rounds are
// crc32c's or mulsum's).
constexpr uint64_t P1 = 0x9E3779B185EBCA87ULL, P2 = 0xC2B2AE3D27D4EB4FULL,
                   P3 = 0x165667B19E3779F9ULL, P4 = 0x85EBCA77C2B2AE63ULL,
                   P5 = 0x27D4EB2F165667C5ULL;

inline uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// mulsum's keys, one a lane: they keep a word of 0 or of equal halves from
// giving the same product in every lane.
constexpr uint64_t K[4] = {0xBE4BA423396CFEB8ULL, 0x1CAD21F72C81017CULL, 0xDB979083E96DD4DEULL,
                           0x1F67B3B7A4A44072ULL};

// One group of mulsum, lane j: a_j += lo32(y) * hi32(y) + x_(j^1) with
// y = x_j ^ K_j; then b_j += a_j. The AVX2 code below must agree with it.
void mulsum_bulk(uint64_t* l, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; i += 32) {
    uint64_t x[4];
    std::memcpy(x, p + i, 32);
    for (int j = 0; j < 4; ++j) {
      const uint64_t y = x[j] ^ K[j];
      l[j] += (y & 0xFFFFFFFFu) * (y >> 32) + x[j ^ 1];
      l[4 + j] += l[j];
    }
  }
}

// Portable crc32c (Castagnoli, reflected), for a reader without SSE4.2.
uint32_t crc32c_sw_u64(uint32_t crc, uint64_t v) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  for (int k = 0; k < 8; ++k) crc = table[(crc ^ (v >> (8 * k))) & 0xFF] ^ (crc >> 8);
  return crc;
}

void crc_bulk_sw(uint64_t* l, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; i += 32)
    for (int k = 0; k < 4; ++k)
      l[k] = crc32c_sw_u64(static_cast<uint32_t>(l[k]), load64(p + i + 8 * k));
}

#if defined(__x86_64__)
// The store side of a fused copy. Streaming stores bypass the cache (a
// reader's destination is not read again soon) and spare the read of each
// line before it is written, but need a 32-byte-aligned address, and large
// buffers often are not aligned (malloc's start 16 bytes into a page, numpy
// aligns to 16). So the streamed blocks start at dst's first aligned byte,
// `head` bytes in: block i's store is an unaligned load of src + head + i
// (lines the checksum reads anyway) streamed to dst + head + i, and the
// head and the bytes past the last whole block go with plain stores.
class FusedStore {
 public:
  FusedStore(uint8_t* dst, const uint8_t* src, size_t n, bool cached)
      : dst_(dst),
        src_(src),
        n_(n),
        head_((32 - reinterpret_cast<uintptr_t>(dst) % 32) % 32),
        stream_(!cached && n >= 32 + head_) {}

  // The checksum's block at src + i, loaded as v.
  __attribute__((target("avx2"))) void block(size_t i, __m256i v) const {
    if (!stream_)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst_ + i), v);
    else if (head_ == 0)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst_ + i), v);
    else if (i + head_ + 32 <= n_)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst_ + head_ + i),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src_ + head_ + i)));
  }

  // After the last block: the streamed stores are ordered before what the
  // caller stores next (the chunk's publication), and the edges are copied.
  void finish() const {
    if (!stream_) return;
    _mm_sfence();
    const size_t end = head_ + (n_ - head_) / 32 * 32;
    std::memcpy(dst_, src_, head_);
    std::memcpy(dst_ + end, src_ + end, n_ - end);
  }

 private:
  uint8_t* dst_;
  const uint8_t* src_;
  size_t n_, head_;
  bool stream_;
};

__attribute__((target("sse4.2,avx2"))) void crc_copy_avx2(uint64_t* l, uint8_t* dst,
                                                          const uint8_t* src, size_t n,
                                                          bool cached) {
  uint64_t a = l[0], b = l[1], c = l[2], d = l[3];
  const FusedStore out(dst, src, n, cached);
  for (size_t i = 0; i < n; i += 32) {
    out.block(i, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    a = _mm_crc32_u64(a, load64(src + i));
    b = _mm_crc32_u64(b, load64(src + i + 8));
    c = _mm_crc32_u64(c, load64(src + i + 16));
    d = _mm_crc32_u64(d, load64(src + i + 24));
  }
  out.finish();
  l[0] = a, l[1] = b, l[2] = c, l[3] = d;
}

// mulsum over n bytes, copying them to dst when Copy (streaming stores
// unless cached: see FusedStore).
template <bool Copy>
__attribute__((target("avx2"))) inline void mulsum_avx2(uint64_t* l, uint8_t* dst,
                                                        const uint8_t* src, size_t n, bool cached) {
  const __m256i k = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(K));
  __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(l));
  __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(l + 4));
  const FusedStore out(dst, src, Copy ? n : 0, cached);
  for (size_t i = 0; i < n; i += 32) {
    // A line 2 KiB ahead: without it one core's loads wait on memory (the
    // root reads its source at ~7 GB/s where memcpy reads at ~9), and 256
    // MiB to 3 ranks took 0.070 s, not 0.059 s (readers gain a little too).
    // Prefetching past the end is harmless: a prefetch never faults.
    if (i % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(src + i + 2048), _MM_HINT_T0);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    if constexpr (Copy) out.block(i, v);
    const __m256i y = _mm256_xor_si256(v, k);
    const __m256i prod = _mm256_mul_epu32(y, _mm256_srli_epi64(y, 32));     // lo32 * hi32
    const __m256i swap = _mm256_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2));  // x_(j^1)
    a = _mm256_add_epi64(a, _mm256_add_epi64(prod, swap));
    b = _mm256_add_epi64(b, a);
  }
  if constexpr (Copy) out.finish();
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(l), a);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(l + 4), b);
}
__attribute__((target("avx2"))) void mulsum_copy_avx2(uint64_t* l, uint8_t* dst, const uint8_t* src,
                                                      size_t n, bool cached) {
  mulsum_avx2<true>(l, dst, src, n, cached);
}
__attribute__((target("avx2"))) void mulsum_bulk_avx2(uint64_t* l, const uint8_t* p, size_t n) {
  mulsum_avx2<false>(l, nullptr, p, n, false);
}

__attribute__((target("sse4.2"))) void crc_bulk_hw(uint64_t* l, const uint8_t* p, size_t n) {
  uint64_t a = l[0], b = l[1], c = l[2], d = l[3];
  for (size_t i = 0; i < n; i += 32) {
    a = _mm_crc32_u64(a, load64(p + i));
    b = _mm_crc32_u64(b, load64(p + i + 8));
    c = _mm_crc32_u64(c, load64(p + i + 16));
    d = _mm_crc32_u64(d, load64(p + i + 24));
  }
  l[0] = a, l[1] = b, l[2] = c, l[3] = d;
}
bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
CopyFn copy_for(Algo a, bool portable) {
  if (portable || !have_avx2()) return nullptr;
  if (a == kMulSum) return mulsum_copy_avx2;
  return a == kCrc32c && have_sse42() ? crc_copy_avx2 : nullptr;
}
#else
bool have_sse42() {
  return false;
}
CopyFn copy_for(Algo, bool) {
  return nullptr;
}
#endif

BulkFn bulk_for(Algo a, bool portable) {
  if (a == kXxh3) return nullptr;  // libxxhash keeps its own state
  if (a == kMulSum) {
#if defined(__x86_64__)
    if (!portable && have_avx2()) return mulsum_bulk_avx2;
#endif
    return mulsum_bulk;
  }
#if defined(__x86_64__)
  if (!portable && have_sse42()) return crc_bulk_hw;
#endif
  return crc_bulk_sw;
}

}  // namespace

Algo preferred_algo() {
  static const Algo a = [] {
    const char* e = std::getenv("MUSTER_CHECKSUM");
    if (e && (std::string_view(e) == "xxh3" || std::string_view(e) == "mul64")) return kXxh3;
    if (e && std::string_view(e) == "crc32c") return kCrc32c;
    return kMulSum;
  }();
  return a;
}

Hasher::Hasher(Algo a, bool portable)
    : algo_(a), bulk_(bulk_for(a, portable)), copy_(copy_for(a, portable)) {
  reset();
}
void Hasher::reset() {
  if (algo_ == kXxh3)
    XXH3_64bits_reset(&xxh3_);
  else if (algo_ == kMulSum)
    lanes_ = {P1, P2, P3, P4};
  else
    lanes_ = {0xFFFFFFFFu, 0x1234567u, 0x89ABCDEu, 0xF0F0F0Fu};
  npend_ = 0;
  total_ = 0;
}
void Hasher::update(const uint8_t* p, size_t n) {
  if (n == 0) return;  // p may be null (an empty buffer's data()): memcpy must not see it
  if (algo_ == kXxh3) {
    XXH3_64bits_update(&xxh3_, p, n);
    return;
  }
  total_ += n;
  if (npend_) {
    size_t k = std::min(n, sizeof pend_ - npend_);
    std::memcpy(pend_ + npend_, p, k);
    npend_ += k, p += k, n -= k;
    if (npend_ < sizeof pend_) return;
    bulk_(lanes_.data(), pend_, sizeof pend_);
    npend_ = 0;
  }
  size_t body = n & ~size_t{31};
  if (body) bulk_(lanes_.data(), p, body);
  std::memcpy(pend_, p + body, n - body);
  npend_ = n - body;
}
void Hasher::copy_update(uint8_t* dst, const uint8_t* src, size_t n, bool cached) {
  if (n == 0) return;  // as in update
  if (!copy_) {
    for (size_t o = 0; o < n; o += kBlock) {
      size_t k = std::min(kBlock, n - o);
      update(src + o, k);
      std::memcpy(dst + o, src + o, k);  // src still in cache
    }
    return;
  }
  if (npend_) {
    size_t k = std::min(n, sizeof pend_ - npend_);
    std::memcpy(dst, src, k);
    update(src, k);
    dst += k, src += k, n -= k;
  }
  size_t body = n & ~size_t{31};
  if (body) {
    copy_(lanes_.data(), dst, src, body, cached);
    total_ += body;
  }
  if (n > body) {
    std::memcpy(dst + body, src + body, n - body);
    update(src + body, n - body);
  }
}
uint64_t Hasher::final() const {
  if (algo_ == kXxh3) return XXH3_64bits_digest(&xxh3_);
  uint64_t h = total_ * P5;
  for (uint64_t l : lanes_) {
    h ^= rotl(l * P2, 31) * P1;
    h = rotl(h, 27) * P1 + P4;
  }
  for (size_t i = 0; i < npend_; ++i) {
    h ^= pend_[i] * P5;
    h = rotl(h, 11) * P1;
  }
  h ^= h >> 33, h *= P2, h ^= h >> 29, h *= P3, h ^= h >> 32;
  return h;
}

uint64_t hash_bytes(const void* p, size_t n) {
  return XXH3_64bits(p, n);
}

}  // namespace muster::bcast
