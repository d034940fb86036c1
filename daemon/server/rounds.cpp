// The event loop's rounds: what bounds each wait, and what each round's
// end does (saves, deliveries, fd and connection checks, an embedded
// daemon's idle exit).
#include <algorithm>
#include <string>

#include "cluster/multi_node.hpp"
#include "log.hpp"
#include "server/runtime.hpp"
#include "server/server.hpp"

namespace muster::daemon {

// What bounds the loop's wait: the state's deadlines, periodic checks, and
// the service manager's status line and watchdog.
void Server::watch_deadlines() {
  auto& rt = *rt_;
  auto& state = *rt.state;
  rt.loop.add_wake_hint([&state]() -> long {
    auto d = state.next_deadline();
    if (!d) return -1;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*d - Clock::now()).count();
    return std::max<long>(0, left + 1);
  });
  if (cfg_.exit_when_idle)
    rt.loop.add_wake_hint([&state] { return state.job_count() == 0 ? 50L : -1L; });
  // A save that failed is tried again until one works.
  rt.loop.add_wake_hint([&rt] { return rt.dirty || rt.state_file->retrying() ? 100L : -1L; });
  // A killed cgroup is removed once its processes are gone: a few ms.
  rt.loop.add_wake_hint([&rt] { return rt.cgroups->removals_pending() ? 10L : -1L; });
  // A client whose replies were dropped is told once it reads again.
  rt.loop.add_wake_hint([&rt] { return rt.unread->waiting() ? 100L : -1L; });
  // Plain TCP connections that never sent a peer request are closed, and
  // connections over a cap whose grace ended are shut.
  rt.loop.add_wake_hint([&rt]() -> long {
    auto d = rt.caps->next_sweep();
    if (!d) return -1;
    return std::max<long>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(*d - Clock::now()).count() + 1);
  });
  // Heartbeats, lost peers and last calls run on a coarse clock.
  rt.loop.add_wake_hint([&state] { return state.cluster().active() ? 50L : -1L; });
  if (hooks_.status_changed)
    rt.loop.set_round_start([this, &rt, &state] {
      auto now_status = state.reports().summary();
      if (now_status != rt.last_status) hooks_.status_changed(now_status);
      rt.last_status = std::move(now_status);
    });
  if (hooks_.tick.count() > 0) {
    // Wakes up for the watchdog even when nothing else happens.
    rt.watchdog = std::make_unique<event::TimerEvent>(rt.loop, [this, &rt] {
      hooks_.on_tick();
      rt.watchdog->schedule(Clock::now() + hooks_.tick);
    });
    rt.watchdog->schedule(Clock::now());
  }
}

void Server::end_round() {
  auto& rt = *rt_;
  auto& state = *rt.state;
  // The round's time from the Env (env.hpp): the waits' deadlines and the
  // peers' silences are judged against it, so a test's clock moves them.
  const auto round_now = rt.env->now();
  state.expire(round_now, rt.out);
  if (state.cluster().active()) state.cluster().tick(round_now, rt.out);
  // Before the replies leave: a worker whose Attach is answered now is
  // released by muster run only then, so it is in its cgroup before exec.
  rt.cgroups->sync(state.jobs());
  rt.cgroups->retry_removals();
  rt.observe.leases(state.devices().slots());
  rt.save_then_deliver();
  // After deliver(), which read the local connections' events.
  rt.fds->check(rt.conns.open());
  rt.user_sockets->bind_wanted(rt.fds->paused());
  // check() read the peer connections' events: no fd is stale.
  if (size_t n = rt.caps->sweep(Clock::now()))
    log::info("closed " + std::to_string(n) +
              " plain TCP connection(s) to the peer port that sent no peer request within " +
              std::to_string(kHandshakeMs / 1000) + " s");
  if (!cfg_.exit_when_idle) return;
  auto now = Clock::now();
  if (rt.leave_until && now > *rt.leave_until) rt.leave_until.reset();
  if (state.job_count() > 0) {
    rt.had_job = true;
    rt.idle_since = now;
  } else if (rt.leave_until ||
             now - rt.idle_since > (rt.had_job ? kIdleAfterJob : std::chrono::seconds(10))) {
    log::info("no jobs left; the embedded daemon stops");
    rt.loop.quit();
  }
}

}  // namespace muster::daemon
