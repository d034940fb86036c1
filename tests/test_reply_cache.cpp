// ReplyCache::hash, which tells a resent request (same client, same id)
// from another request reusing its id: the value saved states hold for
// frames up to 64 KiB (FNV-1a) is unchanged, and a byte changed anywhere in
// a larger frame (a broadcast's 4 MiB chunk) changes the hash.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "persist/reply_cache.hpp"

using muster::daemon::ReplyCache;

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string random_frame(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(g());
  return s;
}

}  // namespace

TEST_CASE("frames up to 64 KiB keep their FNV-1a hash (saved states stay valid)") {
  CHECK(ReplyCache::hash("") == 14695981039346656037ull);
  for (size_t n : {size_t{1}, size_t{100}, size_t{65535}, size_t{65536}}) {
    auto f = random_frame(n, static_cast<uint32_t>(n));
    CHECK(ReplyCache::hash(f) == fnv1a(f));
  }
}

TEST_CASE("a byte changed anywhere in a large frame changes its hash") {
  const size_t n = (size_t{4} << 20) + 13;
  const auto f = random_frame(n, 5);
  const uint64_t h = ReplyCache::hash(f);
  CHECK(ReplyCache::hash(f) == h);  // deterministic
  for (size_t at : {size_t{0}, size_t{65535}, size_t{65536}, size_t{70000}, size_t{1} << 20, n - 14,
                    n - 13, n - 1}) {
    auto g = f;
    g[at] = static_cast<char>(g[at] ^ 0x10);
    INFO("byte " << at);
    CHECK(ReplyCache::hash(g) != h);
  }
  // One byte more or fewer, and two 32-byte groups of the tail swapped.
  CHECK(ReplyCache::hash(f.substr(0, n - 1)) != h);
  CHECK(ReplyCache::hash(f + '\0') != h);
  auto g = f;
  std::swap_ranges(g.begin() + 100000, g.begin() + 100032, g.begin() + 100032);
  CHECK(ReplyCache::hash(g) != h);
}
