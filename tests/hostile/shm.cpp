// Hostile users (issue #42), attack class 1 (in part): what musterd does by
// a job's name alone at the job's end. It removes the /dev/shm segments of
// the job's dead broadcast roots, found by the job's name; run as root, it
// must not remove another user's files under that name.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "muster/client.hpp"
#include "protocol/envelope.hpp"
#include "support/as_user.hpp"
#include "support/process.hpp"
#include "support/skip.hpp"

using namespace muster;
using namespace muster::proto;
using namespace std::chrono_literals;
using namespace muster::test;

TEST_CASE("hostile: the end of another user's job removes none of root's segments of its name") {
  if (!test::root_for()) return;
  test::OpenDaemon d;
  const std::string ep = d.endpoint();
  // A pid that is gone: what the sweep takes for a SIGKILLed creator.
  pid_t dead = ::fork();
  REQUIRE(dead >= 0);
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string name = "/muster.sweepjob.0.0.r0.p" + std::to_string(dead) + ".00000000000000aa";
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);

  {
    // Nobody's job of that name starts and ends (its launcher exits).
    AsNobody nobody([&](Lines& io) {
      io.say(ask(ep, encode(1, Reserve{"sweepjob", 1, false, {}, ::getpid()})));
    });
    REQUIRE(nobody.hear() == "reply=reserved");
  }
  Client c({ep});
  REQUIRE(test::eventually([&] { return c.status().jobs.empty(); }, 10s));
  // One more request: the daemon has synced its containment since.
  c.status();
  std::this_thread::sleep_for(200ms);
  CHECK(::access(("/dev/shm" + name).c_str(), F_OK) == 0);
  ::shm_unlink(name.c_str());
}
