#include "server/permute_thread.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <memory>
#include <new>
#include <utility>

#include "muster/error.hpp"
#include "sampler/sampler.hpp"

namespace muster::daemon {

PermuteThread::PermuteThread() {
  fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd_ < 0) throw Error(ErrorCode::kInternal, "eventfd failed");
  thread_ = std::thread([this] { run(); });
}

PermuteThread::~PermuteThread() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
  ::close(fd_);
}

void PermuteThread::start(uint64_t ticket, uint64_t n, uint64_t seed) {
  {
    std::lock_guard lk(mu_);
    tasks_.push_back({ticket, n, seed});
  }
  wake_.notify_one();
}

std::vector<Permuter::Done> PermuteThread::take() {
  // Cleared before the list is read: a result pushed after the read
  // signals again, so none is left unseen until the next wake-up.
  uint64_t count = 0;
  ssize_t r = ::read(fd_, &count, sizeof count);
  (void)r;
  std::lock_guard lk(mu_);
  return std::exchange(done_, {});
}

void PermuteThread::run() {
  for (;;) {
    Task t{};
    {
      std::unique_lock lk(mu_);
      wake_.wait(lk, [this] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      t = tasks_.front();
      tasks_.pop_front();
    }
    Done d{t.ticket, nullptr};
    try {
      d.perm = std::make_unique_for_overwrite<uint32_t[]>(t.n);
      torch_randperm_u32(d.perm.get(), t.n, t.seed, &stop_);
    } catch (const std::bad_alloc&) {
      d.perm.reset();  // the loop answers the waiting ranks with an error
    }
    if (stop_) return;
    {
      std::lock_guard lk(mu_);
      done_.push_back(std::move(d));
    }
    uint64_t one = 1;
    ssize_t w = ::write(fd_, &one, sizeof one);
    (void)w;
  }
}

}  // namespace muster::daemon
