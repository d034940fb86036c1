#include "gpu/xid_watch.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <utility>

#include "gpu/nvml.hpp"
#include "log.hpp"

namespace muster::gpu {

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
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

void XidWatch::run() {
  while (!stop_) {
    auto e = nvml_->wait_event(500);
    if (!e) continue;
    {
      std::lock_guard lock(mu_);
      events_.push_back({e->first, e->second});
    }
    uint64_t one = 1;
    if (::write(fd_, &one, sizeof one) < 0) log::warning("XID watcher: eventfd write failed");
  }
}

std::vector<XidEvent> XidWatch::take() {
  uint64_t n = 0;
  [[maybe_unused]] auto r = ::read(fd_, &n, sizeof n);
  std::lock_guard lock(mu_);
  return std::exchange(events_, {});
}

}  // namespace muster::gpu
