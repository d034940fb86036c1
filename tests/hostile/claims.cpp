// Hostile users (issue #42), attack class 3: a pid is claimed only when
// every uid of the process -- real, effective, saved and filesystem -- is
// the sender's. A root process that set one of its uids to the attacker's
// (to drop privileges for a while, or a setuid program the attacker
// started) is not the attacker's to hand to the daemon, which would move it
// into the attacker's job cgroup and signal it at job end.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "muster/client.hpp"
#include "protocol/envelope.hpp"
#include "support/as_user.hpp"
#include "support/process.hpp"
#include "support/skip.hpp"

using namespace muster;
using namespace muster::proto;
using namespace std::chrono_literals;
using namespace muster::test;

TEST_CASE("hostile: a process with any uid not the attacker's cannot be claimed by it") {
  if (!test::root_for("make processes of mixed uids")) return;
  test::OpenDaemon d({"--simulate-gpus", "1"});
  const std::string ep = d.endpoint();
  // Each with the attacker's real or effective uid, which the old check
  // (real OR effective) took for the attacker's.
  test::UidChild euid_root(kNobody, 0, 0);               // ruid nobody, euid root
  test::UidChild ruid_root(0, kNobody, 0);               // a root process running as nobody for now
  test::UidChild saved_root(kNobody, kNobody, 0);        // can take root back at any time
  test::UidChild all_nobody(kNobody, kNobody, kNobody);  // truly the attacker's
  // And between two users: the second user's process with the attacker's
  // real or effective uid.
  test::UidChild second_e(test::kSecondUser, kNobody, test::kSecondUser);
  test::UidChild second_r(kNobody, test::kSecondUser, kNobody);
  std::vector<pid_t> foreign = {euid_root.pid, ruid_root.pid, saved_root.pid, second_e.pid,
                                second_r.pid};
  const pid_t theirs = all_nobody.pid;

  AsNobody nobody([&](Lines& io) {
    uint64_t id = 1;
    for (pid_t p : foreign) {
      io.say(ask(ep, encode(id++, Reserve{"grab-" + std::to_string(p), 1, false, {}, p})));
      io.say(ask(ep, encode(id++, Join{"join-" + std::to_string(p), 1, false, p, -1})));
    }
    io.say(ask(ep, encode(id++, Reserve{"own", 1, false, {}, theirs})));
    io.say(ask(ep, encode(id++, Attach{"own", {foreign[0]}})));
    io.hear();
  });
  for (pid_t p : foreign) {
    for (const char* what : {"reserve", "join"}) {
      auto line = nobody.hear();
      INFO(what << " of pid " << p << ": " << line);
      CHECK(starts_with(line, "error=permission_denied "));
      CHECK(line.find("pid " + std::to_string(p) + " is not a running process of uid 65534") !=
            std::string::npos);
    }
  }
  CHECK(nobody.hear() == "reply=reserved");  // all four uids nobody's: the attacker's own
  auto attach = nobody.hear();
  INFO(attach);
  CHECK(starts_with(attach, "error=permission_denied "));

  // None of the refused claims made a job.
  auto st = Client({ep}).status();
  REQUIRE(st.jobs.size() == 1);
  CHECK(st.jobs[0].id == "own");
  nobody.say("done");
}
