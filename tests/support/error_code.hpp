// The code of the muster::Error a call throws (kOk when it throws none), for
// tests that expect a refusal.
#pragma once

#include <functional>

#include "muster/error.hpp"

namespace muster::test {

inline ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kOk;
}

}  // namespace muster::test
