#include "event/boundary.hpp"

#include <atomic>
#include <new>

#include "log.hpp"

namespace muster::daemon::event {

namespace {
std::atomic<uint64_t> g_failures{0};
}

std::string describe_exception(std::exception_ptr e) noexcept {
  try {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      return "out of memory (std::bad_alloc)";
    } catch (const std::exception& x) {
      return x.what();
    } catch (...) {
      return "an exception of unknown type";
    }
  } catch (...) {
    return "an exception";  // a string that could not be made
  }
}

void contained_failure(const char* what, std::exception_ptr e) noexcept {
  g_failures.fetch_add(1, std::memory_order_relaxed);
  try {
    // The log's rate limit (log_limit.hpp) keeps a repeated failure to a
    // few lines.
    log::error(std::string(what) + " failed and was abandoned: " + describe_exception(e));
  } catch (...) {
  }
}

uint64_t failures() noexcept {
  return g_failures.load(std::memory_order_relaxed);
}

}  // namespace muster::daemon::event
