// The chunk checksums of a broadcast (client/lib/broadcast/checksum.*):
// the SIMD code gives the values of the portable code for every algorithm,
// whatever the split of the bytes or the alignment of a copy (a root and a
// reader on different CPUs must agree), and mulsum, the default, sees the
// damage a torn or stale chunk shows.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "lib/broadcast/checksum.hpp"

using namespace muster::bcast;

namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937_64 g(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}

uint64_t sum_of(Algo a, const uint8_t* p, size_t n, bool portable = false) {
  Hasher h(a, portable);
  h.update(p, n);
  return h.final();
}

const Algo kAlgos[] = {kCrc32c, kXxh3, kMulSum};

}  // namespace

TEST_CASE("SIMD and portable checksums agree, whatever the split") {
  std::mt19937 g(7);
  for (Algo a : kAlgos) {
    INFO("algorithm " << a);
    for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{100},
                     size_t{4096}, size_t{65537}, (size_t{1} << 20) + 77}) {
      INFO(n << " bytes");
      auto data = random_bytes(n, static_cast<uint32_t>(n) + a);
      const uint64_t want = sum_of(a, data.data(), n, true);
      CHECK(sum_of(a, data.data(), n) == want);

      // Fed in random pieces, through update and copy_update in turn.
      std::vector<uint8_t> out(n + 64, 0xEE);
      for (bool cached : {false, true}) {
        for (size_t shift : {size_t{0}, size_t{5}, size_t{32}}) {
          Hasher h(a);
          size_t o = 0;
          bool copy = false;
          while (o < n) {
            size_t k = std::min(n - o, size_t{1} + g() % 70000);
            if (copy)
              h.copy_update(out.data() + shift + o, data.data() + o, k, cached);
            else
              h.update(data.data() + o, k), std::memcpy(out.data() + shift + o, data.data() + o, k);
            o += k, copy = !copy;
          }
          CHECK(h.final() == want);
          CHECK(std::equal(data.begin(), data.end(), out.begin() + shift));  // n may be 0
        }
      }
    }
  }
}

TEST_CASE("a whole copy_update copies the bytes and checksums them") {
  for (Algo a : kAlgos) {
    INFO("algorithm " << a);
    auto data = random_bytes((size_t{4} << 20) + 3, 11);
    std::vector<uint8_t> out(data.size());
    for (bool cached : {false, true}) {
      Hasher h(a);
      h.copy_update(out.data(), data.data(), data.size(), cached);
      CHECK(h.final() == sum_of(a, data.data(), data.size(), true));
      CHECK(out == data);
    }
  }
}

// Streaming stores start at the destination's first 32-byte-aligned byte:
// every offset from an aligned address, and sizes around the edges, copy
// every byte once, leave the bytes around alone, and checksum the source.
TEST_CASE("a streamed copy_update is exact at every destination alignment") {
  auto data = random_bytes(4096 + 96, 5);
  alignas(64) static uint8_t out[4096 + 256];
  for (Algo a : kAlgos) {
    INFO("algorithm " << a);
    for (size_t shift = 0; shift < 64; ++shift) {
      for (size_t n : {size_t{32}, size_t{63}, size_t{64}, size_t{95}, size_t{96}, size_t{97},
                       size_t{1000}, size_t{4096 + 96}}) {
        INFO("destination at +" << shift << ", " << n << " bytes");
        std::memset(out, 0xEE, sizeof out);
        Hasher h(a);
        h.copy_update(out + 64 + shift, data.data(), n, false);
        CHECK(h.final() == sum_of(a, data.data(), n, true));
        CHECK(std::equal(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n),
                         out + 64 + shift));
        CHECK(std::all_of(out, out + 64 + shift, [](uint8_t b) { return b == 0xEE; }));
        CHECK(std::all_of(out + 64 + shift + n, out + sizeof out,
                          [](uint8_t b) { return b == 0xEE; }));
      }
    }
  }
}

TEST_CASE("mulsum sees flipped bits, reordered groups, stale halves and lengths") {
  const size_t n = 8192;
  auto data = random_bytes(n, 3);
  const uint64_t base = sum_of(kMulSum, data.data(), n);

  // Every single-bit flip in the first 1 KiB and every 61st byte beyond.
  for (size_t i = 0; i < n; i += i < 1024 ? 1 : 61)
    for (int bit = 0; bit < 8; ++bit) {
      auto d = data;
      d[i] ^= static_cast<uint8_t>(1u << bit);
      INFO("byte " << i << " bit " << bit);
      REQUIRE(sum_of(kMulSum, d.data(), n) != base);
    }

  // Two 32-byte groups swapped: a sum alone would not notice.
  for (size_t i : {size_t{0}, size_t{32 * 5}, size_t{n - 64}}) {
    auto d = data;
    std::swap_ranges(d.begin() + i, d.begin() + i + 32, d.begin() + i + 32);
    INFO("groups at " << i);
    CHECK(sum_of(kMulSum, d.data(), n) != base);
  }
  // Two words swapped inside one group (lanes 0 and 1 share their words).
  {
    auto d = data;
    std::swap_ranges(d.begin(), d.begin() + 8, d.begin() + 8);
    CHECK(sum_of(kMulSum, d.data(), n) != base);
  }

  // A torn chunk: its second half still the previous chunk's bytes, or 0.
  auto older = random_bytes(n, 4);
  auto torn = data;
  std::memcpy(torn.data() + n / 2, older.data() + n / 2, n / 2);
  CHECK(sum_of(kMulSum, torn.data(), n) != base);
  std::fill(torn.begin() + n / 2, torn.end(), 0);
  CHECK(sum_of(kMulSum, torn.data(), n) != base);

  // All-zero and all-equal words, with their lengths.
  std::vector<uint8_t> zeros(n + 32, 0);
  CHECK(sum_of(kMulSum, zeros.data(), n) != sum_of(kMulSum, zeros.data(), n + 32));
  CHECK(sum_of(kMulSum, zeros.data(), n) != sum_of(kMulSum, zeros.data(), n - 1));
  std::vector<uint8_t> ones(n, 0xFF);
  CHECK(sum_of(kMulSum, ones.data(), n) != sum_of(kMulSum, zeros.data(), n));
}

TEST_CASE("mulsum is the default, and known_algo refuses other numbers") {
  // MUSTER_CHECKSUM is not set in the test environment.
  CHECK(preferred_algo() == kMulSum);
  CHECK(known_algo(kCrc32c));
  CHECK(known_algo(kMulSum));
  CHECK(known_algo(kXxh3));
  CHECK_FALSE(known_algo(0));
  CHECK_FALSE(known_algo(2));  // the hand-written xxhash64-style round, retired
  CHECK_FALSE(known_algo(5));
}

TEST_CASE("xxh3 is libxxhash's XXH3, however the bytes are fed") {
  // XXH3_64bits of no bytes, as xxhash's own tests have it.
  CHECK(sum_of(kXxh3, nullptr, 0) == 0x2D06800538D394C2ULL);
  for (size_t n : {size_t{1}, size_t{240}, size_t{241}, size_t{100000}}) {
    INFO(n << " bytes");
    auto data = random_bytes(n, 9);
    CHECK(sum_of(kXxh3, data.data(), n) == XXH3_64bits(data.data(), n));
    CHECK(hash_bytes(data.data(), n) == XXH3_64bits(data.data(), n));
  }
}
