// NVML's XID events, waited for on a thread of their own: NVML offers no fd
// to poll, only nvmlEventSetWait_v2. The thread blocks there with a 500 ms
// timeout (so stopping takes at most that) and hands each event to the
// daemon's loop through an eventfd; the loop stays the one thread that
// touches the state. A lost GPU makes the wait return at once, every time:
// the thread then finds the lost GPUs, hands them over and watches the
// others in a new set; any other error waits a second before trying again.
// It never spins.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace muster::gpu {

class Nvml;

struct XidEvent {
  uint32_t index = 0;  // NVML's
  uint64_t xid = 0;
  // Non-empty: the GPU was lost (NVML_ERROR_GPU_IS_LOST), and why; xid is 0.
  std::string lost{};
  // What the GPU's health checks (nvml_health.cpp, the driver's recovery
  // action among them) say right after the XID; "" when fine.
  std::string health{};
};

class XidWatch {
 public:
  // Null when there is no NVML or it offers no events.
  static std::unique_ptr<XidWatch> start(const std::shared_ptr<Nvml>& nvml);
  ~XidWatch();
  XidWatch(const XidWatch&) = delete;
  XidWatch& operator=(const XidWatch&) = delete;

  // Readable when events wait; take() empties both.
  int fd() const { return fd_; }
  std::vector<XidEvent> take();

 private:
  explicit XidWatch(std::shared_ptr<Nvml> nvml);
  void run();
  void push(XidEvent e);
  void find_lost(std::vector<unsigned>& lost);
  // Sleeps up to `ms`, less when stopped.
  void pause(unsigned ms);

  std::shared_ptr<Nvml> nvml_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable stopped_;
  std::vector<XidEvent> events_;
  std::thread thread_;
};

}  // namespace muster::gpu
