// What the libFuzzer targets share (each is one translation unit, which
// includes this once): a finding that stops the run, the input read byte
// by byte, LLVMFuzzerInitialize (the daemon's log kept to errors), and a
// node's State of two simulated GPUs.
#pragma once

#include <errno.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cluster/multi_node.hpp"
#include "core/state.hpp"
#include "log.hpp"

namespace muster::fuzz {

// A finding: says which target (the program's name) found what, and
// aborts (libFuzzer keeps the input).
[[noreturn]] inline void die(const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, why.c_str());
  std::abort();
}

// The fuzzer's input, a byte at a time (zeros once it is used up).
struct Bytes {
  const uint8_t* d;
  size_t n;
  size_t i = 0;
  bool more() const { return i < n; }
  uint8_t next() { return i < n ? d[i++] : 0; }
  uint32_t u16() { return static_cast<uint32_t>(next()) << 8 | next(); }
};

// A node daemon's State with two simulated GPUs that takes part in
// clusters (its name "here", 2 s rounds, up to 16 nodes).
struct TwoGpuNode {
  daemon::PidWatch watch;
  daemon::State s{{{0, "sim0"}, {1, "sim1"}}, watch};
  TwoGpuNode() { s.cluster().configure("here", std::chrono::milliseconds(2000), "", 16); }
};

}  // namespace muster::fuzz

// Only the daemon's errors reach the log.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  muster::log::set_level(muster::log::Level::kError);
  return 0;
}
