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
  s.reports().set_stuck_after(1000ms);
  for (int64_t r = 0; r < 2; ++r)
    REQUIRE(ask(s, 1 + r, Join{"counted", 2, false, ::getpid(), r}).size() == 1);
  CHECK(s.reports().wait_counts().parked == 0);
  // Rank 0 enters; rank 1 never does.
  CHECK(ask(s, 10, Barrier{"counted", 0, "b", 600000}).empty());
  CHECK(s.reports().wait_counts().parked == 1);
  CHECK(s.reports().wait_counts().stuck == 0);
  CHECK(s.reports().wait_counts().stuck_detected == 0);
  auto waits = s.reports().open_waits("counted");
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
  CHECK(s.reports().wait_counts().parked == 1);
  CHECK(s.reports().wait_counts().stuck == 1);
  CHECK(s.reports().wait_counts().stuck_detected == 1);
  CHECK(s.reports().open_waits("counted")[0].stuck);
  s.expire(Clock::now() + 3s, out);
  CHECK(s.reports().wait_counts().stuck_detected == 1);  // once per wait, never again

  // The barrier fills: nothing parked, nothing stuck; the counter stays.
  CHECK(ask(s, 11, Barrier{"counted", 1, "b", 600000}).size() == 2);
  CHECK(s.reports().wait_counts().parked == 0);
  CHECK(s.reports().wait_counts().stuck == 0);
  CHECK(s.reports().wait_counts().stuck_detected == 1);
  CHECK(s.reports().open_waits("counted").empty());
  CHECK(s.reports().open_waits("no-such-job").empty());
}

namespace {

template <class M>
M round_trip(const M& m) {
  auto bytes = encode(7, m);
  auto env = decode_envelope(bytes.data(), bytes.size());
  return M::unpack(env.payload);
}

}  // namespace

TEST_CASE("open waits travel in status replies, heartbeats and job_waits, optional on the wire") {
  WaitStatus w{"barrier", "epoch-3", 3, 4, {{3, 1, 4242}}, 41000, true};
  JobStatus j{"run42", 0, 4, 2, {}, 1000};
  j.waits = {w, WaitStatus{"key", "ready", 1, 0, {{-1, -1, 0}}, 5, false}};
  j.job_wide = true;
  StatusReply s{"0.1.0", 1, 0.5, {}, {j}};
  CHECK(round_trip(s) == s);
  CHECK(round_trip(Status{"run42"}) == Status{"run42"});
  CHECK(round_trip(Status{}) == Status{});
  JobWaitsReply r{{w}};
  CHECK(round_trip(r) == r);
  CHECK(round_trip(JobWaits{"run42", 3, "node-b"}) == JobWaits{"run42", 3, "node-b"});
  Heartbeat hb{"node-b", {{"run42", 3, {w}}}};
  CHECK(round_trip(hb) == hb);

  // A job with no waits writes no waits field: the frame an older client
  // or coordinator knows, read back as none.
  JobStatus plain{"run42", 0, 4, 2, {}, 1000};
  auto bytes = encode(7, StatusReply{"0.1.0", 1, 0.5, {}, {plain}});
  CHECK(bytes.find("waits") == std::string::npos);
  CHECK(bytes.find("job_wide") == std::string::npos);
  auto back = round_trip(StatusReply{"0.1.0", 1, 0.5, {}, {plain}});
  CHECK(back.jobs[0].waits.empty());
  CHECK_FALSE(back.jobs[0].job_wide);

  // More ranks than a wait may list, or a bad job id in status, are refused.
  WaitStatus many{"barrier", "b", 0, 100};
  many.ranks.resize(kMaxWaitRanks + 1);
  auto too_many = encode(7, JobWaitsReply{{many}});
  auto env = decode_envelope(too_many.data(), too_many.size());
  CHECK_THROWS_AS(JobWaitsReply::unpack(env.payload), Error);
  auto bad = encode(7, Status{"has space"});
  auto env2 = decode_envelope(bad.data(), bad.size());
  CHECK_THROWS_AS(Status::unpack(env2.payload), Error);
}
