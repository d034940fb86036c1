// The code of the muster::Error a call throws (kOk when it throws none), and
// what it threw as one line, for tests that expect a refusal.
#pragma once

#include <functional>
#include <string>

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

// What a call (a wait) ended with: "" when it returned, else "CODE: what".
inline std::string outcome(const std::function<void()>& f) {
  try {
    f();
    return "";
  } catch (const Error& e) {
    return std::string(error_name(e.code())) + ": " + e.what();
  }
}

}  // namespace muster::test
