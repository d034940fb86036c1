// Test support for the NVML tests of a GPU failing under a running job
// (test_nvml_health.cpp, test_nvml_events.cpp). Uses Catch2: for test
// cases only.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <string>

#include "muster/client.hpp"
#include "support/error_code.hpp"
#include "support/nvml_node.hpp"
#include "support/process.hpp"

namespace muster::test {

// A private daemon on the 8-GPU node double running job "train" of two
// ranks on GPUs 0 and 1; rank 0 waits in barrier "step" (60 s), which
// rank 1 never reaches, as a rank stuck in a collective on a dead GPU
// would. `waiting` is how that wait ends (outcome()). The constructor
// checks both leases, and that the wait has not ended after 300 ms, time
// for it to park.
struct StuckJob {
  NvmlNode node{eight_gpu_node()};
  TestDaemon d{{}, node.env()};
  Client r0{ClientOptions{d.endpoint()}}, r1{ClientOptions{d.endpoint()}};
  std::future<std::string> waiting;

  StuckJob() {
    using namespace std::chrono_literals;
    CHECK(r0.join({"train", 2, true, 0}).device == 0);
    CHECK(r1.join({"train", 2, true, 1}).device == 1);
    waiting = std::async(std::launch::async,
                         [this] { return outcome([this] { r0.barrier("step", 60s); }); });
    CHECK(waiting.wait_for(300ms) == std::future_status::timeout);
  }
};

}  // namespace muster::test
