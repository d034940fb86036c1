// Names of the values of a small enum that counts 0, 1, 2, ...: one table,
// indexed by value, whose size a static_assert holds to the last value.
#pragma once

#include <cstddef>

namespace muster::proto {

template <class E, size_t N>
constexpr const char* name_in(const char* const (&names)[N], E value, const char* unknown) {
  auto i = static_cast<size_t>(value);
  return i < N ? names[i] : unknown;
}

// Whether a table names every value up to last (and no more).
template <class E, size_t N>
constexpr bool names_all(const char* const (&)[N], E last) {
  return N == static_cast<size_t>(last) + 1;
}

}  // namespace muster::proto
