// What the metrics show, as plain data: the loop fills one of these from
// the daemon's state (State::fill_metrics, and the server's own counters)
// and renders it to text (render.hpp) that the HTTP thread serves. Nothing
// here points into live state.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "metrics/text.hpp"

namespace muster::daemon::metrics {

struct GpuSample {
  int64_t index = 0;
  std::string uuid;
  std::string job;    // the holder's name, empty when free
  std::string owner;  // the holder's owner (a uid), empty when free or none
  bool quarantined = false;
  bool drained = false;
};

// Slot states in jobs/job.hpp's order: free, reserved, running, joined,
// exited.
inline constexpr size_t kSlotStates = 5;

struct JobSample {
  std::string id;     // the job's name: two users' jobs may share one,
  std::string owner;  // so each series also says the owner's uid ("" = none)
  uint64_t generation = 0;
  uint32_t world_size = 0;
  std::array<uint32_t, kSlotStates> ranks{};  // local ranks by slot state
  uint64_t parked_waits = 0;                  // key waits and barrier arrivals parked
  // Open barriers and key waits of the job older than --stuck-after, as
  // `muster status` lists them (one per barrier or awaited key).
  uint64_t stuck_waits = 0;
  uint64_t store_bytes = 0;
  uint64_t store_keys = 0;
};

// A daemon this one hears heartbeats from (a node of a job coordinated
// here) or sends them to (the coordinator of a job of ours).
struct PeerSample {
  std::string peer;  // node id, or the coordinator's host:port
  std::string role;  // "node" or "coordinator"
  double heartbeat_age_s = 0;
  bool lost = false;
};

// What the request path counts, in fixed arrays indexed by message type and
// error code: no allocation per request.
struct RequestStats {
  static constexpr size_t kTypes = 256;
  static constexpr size_t kCodes = 64;
  // Upper bounds of the handling-time histogram, in seconds.
  static constexpr double kLatencyBounds[] = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1};
  std::array<uint64_t, kTypes> requests{};
  std::array<Histogram, kTypes> latency{};
  std::array<uint64_t, kCodes> errors{};

  void request(uint16_t type, std::chrono::steady_clock::duration took) {
    size_t t = type < kTypes ? type : 0;
    ++requests[t];
    latency[t].observe(kLatencyBounds, std::chrono::duration<double>(took).count());
  }
  void error(uint16_t code) { ++errors[code < kCodes ? code : 0]; }
};

// The state file's saves.
struct SaveStats {
  static constexpr double kLatencyBounds[] = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
  Histogram latency;
  uint64_t failures = 0;
  // Changes refused before they were made: no room to save them.
  uint64_t refused = 0;
};

struct Sample {
  std::vector<GpuSample> gpus;
  std::vector<JobSample> jobs;
  std::vector<PeerSample> peers;
  uint64_t restarts = 0;  // generation changes seen since the daemon started
  uint64_t replies_dropped = 0;
  uint64_t stuck_detected = 0;  // stuck waits logged since the daemon started
  double uptime_s = 0;
};

// The whole exposition: every muster_* family, HELP and TYPE first.
std::string render(const Sample& s, const RequestStats& r, const SaveStats& saves);

}  // namespace muster::daemon::metrics
