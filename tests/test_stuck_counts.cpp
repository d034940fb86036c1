// The numbers behind "which rank is stuck where" (issue #23), for the
// metrics: State::wait_counts() and State::open_waits(), driven in-process.
#include <unistd.h>

#include <catch2/catch.hpp>

#include "core/state.hpp"

using namespace muster;
using namespace muster::daemon;
using namespace muster::proto;
using namespace std::chrono_literals;

namespace {

template <class M>
std::vector<Outgoing> ask(State& s, uint64_t id, const M& m) {
  auto frame = encode(id, m);
  auto env = decode_envelope(frame.data(), frame.size());
  ReplyTo to;
  to.routing_id = "client";
  to.request_id = id;
  std::vector<Outgoing> out;
  s.handle(to, env, out);
  return out;
}

}  // namespace

TEST_CASE("a barrier parked past stuck_after is counted stuck, and detected once") {
  PidWatch watch;
  State s{{}, watch};
  s.set_stuck_after(1000ms);
  for (int64_t r = 0; r < 2; ++r)
    REQUIRE(ask(s, 1 + r, Join{"counted", 2, false, ::getpid(), r}).size() == 1);
  CHECK(s.wait_counts().parked == 0);
  // Rank 0 enters; rank 1 never does.
  CHECK(ask(s, 10, Barrier{"counted", 0, "b", 600000}).empty());
  CHECK(s.wait_counts().parked == 1);
  CHECK(s.wait_counts().stuck == 0);
  CHECK(s.wait_counts().stuck_detected == 0);
  auto waits = s.open_waits("counted");
  REQUIRE(waits.size() == 1);
  CHECK(waits[0].arrived == 1);
  CHECK(waits[0].expected == 2);
  REQUIRE(waits[0].ranks.size() == 1);
  CHECK(waits[0].ranks[0].rank == 1);
  CHECK_FALSE(waits[0].stuck);
  // The loop wakes for the stuck time as for a deadline.
  auto next = s.next_deadline();
  REQUIRE(next);
  CHECK(*next <= Clock::now() + 1000ms);

  std::vector<Outgoing> out;
  s.expire(Clock::now() + 2s, out);
  CHECK(out.empty());  // stuck is not timed out: the wait stays parked
  CHECK(s.wait_counts().parked == 1);
  CHECK(s.wait_counts().stuck == 1);
  CHECK(s.wait_counts().stuck_detected == 1);
  CHECK(s.open_waits("counted")[0].stuck);
  s.expire(Clock::now() + 3s, out);
  CHECK(s.wait_counts().stuck_detected == 1);  // once per wait, never again

  // The barrier fills: nothing parked, nothing stuck; the counter stays.
  CHECK(ask(s, 11, Barrier{"counted", 1, "b", 600000}).size() == 2);
  CHECK(s.wait_counts().parked == 0);
  CHECK(s.wait_counts().stuck == 0);
  CHECK(s.wait_counts().stuck_detected == 1);
  CHECK(s.open_waits("counted").empty());
  CHECK(s.open_waits("no-such-job").empty());
}
