#include "gpu/xid_watch.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "gpu/nvml.hpp"
#include "log.hpp"

namespace muster::gpu {

namespace {
constexpr unsigned kWaitMs = 500;
constexpr unsigned kBackoffMs = 1000;
}  // namespace

std::unique_ptr<XidWatch> XidWatch::start(const std::shared_ptr<Nvml>& nvml) {
  if (!nvml || !nvml->open_events()) return nullptr;
  std::unique_ptr<XidWatch> w(new XidWatch(nvml));
  if (w->fd_ < 0) return nullptr;
  w->thread_ = std::thread([p = w.get()] { p->run(); });
  return w;
}

XidWatch::XidWatch(std::shared_ptr<Nvml> nvml)
    : nvml_(std::move(nvml)), fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

XidWatch::~XidWatch() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stopped_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

void XidWatch::pause(unsigned ms) {
  std::unique_lock lock(mu_);
  stopped_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stop_.load(); });
}

void XidWatch::push(XidEvent e) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
  }
  uint64_t one = 1;
  if (::write(fd_, &one, sizeof one) < 0) log::warning("XID watcher: eventfd write failed");
}

// NVML_ERROR_GPU_IS_LOST names no GPU: every watched one is asked again,
// and each lost one is handed to the loop (which quarantines it) and left
// out of a new set, which NVML then lets wait again.
void XidWatch::find_lost(std::vector<unsigned>& lost) {
  size_t before = lost.size();
  unsigned n = nvml_->count();
  for (unsigned i = 0; i < n; ++i)
    if (std::find(lost.begin(), lost.end(), i) == lost.end() && nvml_->lost(i)) {
      lost.push_back(i);
      push({i, 0, "lost: the GPU fell off the bus (NVML_ERROR_GPU_IS_LOST)", ""});
      log::warning(log::gpu(i), "GPU " + std::to_string(i) +
                                    " is lost (NVML_ERROR_GPU_IS_LOST): no longer watched");
    }
  if (lost.size() > before) nvml_->open_events(lost);
  // No GPU answers lost, yet the wait says so: NVML would say it again at
  // once. Wait, so as not to spin.
  if (lost.size() == before) pause(kBackoffMs);
}

void XidWatch::run() {
  std::vector<unsigned> lost;
  int last_error = 0;
  while (!stop_) {
    if (nvml_->watched() == 0) {  // nothing (left) to wait for
      pause(kWaitMs);
      continue;
    }
    auto e = nvml_->wait_event(kWaitMs);
    if (e.kind == Nvml::Event::kXid) {
      push({e.index, e.xid, "", nvml_->problem(e.index)});
    } else if (e.kind == Nvml::Event::kLost) {
      find_lost(lost);
    } else if (e.kind == Nvml::Event::kError) {
      if (e.error != last_error)
        log::warning("XID watcher: nvmlEventSetWait_v2 failed (error " + std::to_string(e.error) +
                     "); trying again every second");
      last_error = e.error;
      pause(kBackoffMs);
      continue;
    }
    last_error = 0;
  }
}

std::vector<XidEvent> XidWatch::take() {
  uint64_t n = 0;
  [[maybe_unused]] auto r = ::read(fd_, &n, sizeof n);
  std::lock_guard lock(mu_);
  return std::exchange(events_, {});
}

}  // namespace muster::gpu
