// NVML's XID events, waited for on a thread of their own: NVML offers no fd
// to poll, only nvmlEventSetWait_v2. The thread blocks there with a 500 ms
// timeout (so stopping takes at most that) and hands each event to the
// daemon's loop through an eventfd; the loop stays the one thread that
// touches the state.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace muster::gpu {

class Nvml;

struct XidEvent {
  uint32_t index = 0;  // NVML's
  uint64_t xid = 0;
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

  std::shared_ptr<Nvml> nvml_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<XidEvent> events_;
  std::thread thread_;
};

}  // namespace muster::gpu
