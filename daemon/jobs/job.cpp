#include "jobs/job.hpp"

#include <atomic>
#include <cstddef>

namespace muster::daemon {

uint64_t next_job_incarnation() {
  static std::atomic<uint64_t> next{0};
  return ++next;
}

namespace {

// Names by enum value, in the enums' order.
constexpr const char* kSlotStateNames[] = {"free", "reserved", "running", "joined", "exited"};
constexpr const char* kPhaseNames[] = {"forming", "running", "broken", "waiting"};

template <size_t N, class E>
const char* name_of(const char* const (&names)[N], E e) {
  auto i = static_cast<size_t>(e);
  return i < N ? names[i] : "?";
}

template <class E, size_t N>
std::optional<E> parse(const char* const (&names)[N], std::string_view s) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) return static_cast<E>(i);
  return std::nullopt;
}

}  // namespace

const char* slot_state_name(SlotState s) {
  return name_of(kSlotStateNames, s);
}

std::optional<SlotState> slot_state_from_string(std::string_view s) {
  return parse<SlotState>(kSlotStateNames, s);
}

const char* to_string(ClusterPhase p) {
  return name_of(kPhaseNames, p);
}

std::optional<ClusterPhase> cluster_phase_from_string(std::string_view s) {
  return parse<ClusterPhase>(kPhaseNames, s);
}

}  // namespace muster::daemon
