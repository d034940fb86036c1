// The bytes the multi-node tests send and check, made and digested the same
// way by the worker (support/cluster_worker.cpp) and by the tests that
// predict what it prints (test_cluster.cpp, test_cluster_bcast.cpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace muster::test {

// FNV-1a over the bytes.
inline uint64_t fnv(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i)
    h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

// The bytes of a broadcast: splitmix64 words, then tail bytes.
inline void pattern(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(p + i, &z, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(i * 131 + seed);
}

// FNV-1a over 8-byte words, then the tail bytes.
inline uint64_t digest(const uint8_t* p, size_t n, uint64_t h = 1469598103934665603ull) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// A digest as the worker prints it: 16 lowercase hex digits.
inline std::string hex64(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace muster::test
