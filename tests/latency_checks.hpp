// What the hostile tests check of others' requests during an attack (issue
// 43), as a LatencyProbe (support/latency.hpp) saw them: all answered, p99
// within 100 ms (not under ASan: see p99_within_bound). Catch2's macros,
// so a header of the tests', not of support/.
#pragma once

#include <catch2/catch.hpp>

#include "support/latency.hpp"

#define CHECK_OTHERS_SERVED(probe, what)                         \
  do {                                                           \
    auto r_ = (probe).stop();                                    \
    WARN("root's pings during " << (what) << ": " << r_.line()); \
    CHECK(r_.unanswered == 0);                                   \
    CHECK(::muster::test::p99_within_bound(r_.p99_ms));          \
  } while (0)
