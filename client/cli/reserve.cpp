#include "cli/reserve.hpp"

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <optional>
#include <thread>

#include "cli/supervisor.hpp"
#include "muster/client.hpp"

namespace muster::cli {

namespace {

// --wait-for-gpus: whether to try the Reserve again after `e`, saying every
// 10 s why. Only no_device waits (the daemon's sentence names each GPU's
// holder, or a quarantine, which the user may then stop waiting for); the
// wait is the launcher's, so two waiting jobs are served in no set order.
struct GpuWait {
  std::optional<std::chrono::steady_clock::time_point> start;
  std::chrono::steady_clock::time_point next_word;
};

bool wait_for_gpus(const RunOptions& o, const Error& e, GpuWait& w) {
  if (o.cpu || o.wait_gpus_s <= 0 || e.code() != ErrorCode::kNoDevice) return false;
  auto now = std::chrono::steady_clock::now();
  if (!w.start) w.start = w.next_word = now;
  auto waited = std::chrono::duration<double>(now - *w.start).count();
  if (waited >= o.wait_gpus_s) {
    std::cerr << "muster run: no GPUs came free in " << o.wait_gpus_s << " s (--wait-for-gpus)\n";
    return false;
  }
  if (int sig = take_pending_stop_signal()) throw StoppedWaiting(sig);
  if (now >= w.next_word) {
    std::cerr << "muster run: waiting for GPUs (" << static_cast<int>(waited) << " s of "
              << o.wait_gpus_s << " s, --wait-for-gpus): " << e.what() << "\n";
    w.next_word += std::chrono::seconds(10);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  return true;
}

}  // namespace

muster::Reservation reserve_slots(const std::string& endpoint, const RunOptions& o,
                                  const EmbeddedPeering& peering, const std::string& job,
                                  uint32_t attempt, uint32_t generation,
                                  const std::vector<int>& devices) {
  bool restart = attempt > 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  GpuWait gpu_wait;
  for (;;) {
    bool answered = false;  // ensure_daemon found or started one
    try {
      ensure_daemon(endpoint, o.simulate_gpus, peering);
      answered = true;
      Client launcher({endpoint});
      return muster::reserve(launcher, job, o.nproc, !o.cpu, devices, getpid(), generation);
    } catch (const Error& e) {
      bool busy = e.code() == ErrorCode::kConflict || e.code() == ErrorCode::kNoDevice;
      // A daemon that answered and then was gone: an embedded one whose
      // last job had just ended stopped meanwhile; the next round starts
      // another. Retried on a first attempt too.
      bool gone = e.code() == ErrorCode::kUnavailable;
      if (wait_for_gpus(o, e, gpu_wait)) continue;
      if (!((restart && (busy || gone)) || (answered && gone)) ||
          std::chrono::steady_clock::now() > until)
        throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace muster::cli
