// musterd's state directory on a disk that fails, in process: the server
// runs on a thread of the test over a FaultEnv (support/fault_env.hpp), and
// the test says when the disk's syncs fail (EIO) and when it is full
// (ENOSPC). Nothing is acknowledged that a restarted daemon would not know;
// a change that cannot be saved is refused and changes nothing; once the
// disk works again, so does the daemon. A restart is a new Server over the
// same directory on the real disk, once the old one stopped on a disk that
// took nothing more: the files hold what they held when it stopped serving,
// as after a kill -9 (test_crash_points.cpp kills a real musterd).
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "log.hpp"
#include "muster/client.hpp"
#include "server/server.hpp"
#include "support/error_code.hpp"
#include "support/fault_env.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::code_of;
using test::FaultEnv;

namespace {

// A daemon in this process, serving on its own thread until stopped.
class InProcess {
 public:
  explicit InProcess(daemon::Env& env) { start(env); }
  ~InProcess() { stop(); }

  std::string endpoint() const { return server_->endpoint(); }
  const std::string& dir() const { return dir_.path(); }

  void start(daemon::Env& env) {
    log::set_level(log::Level::kWarning);
    daemon::Config cfg;
    cfg.runtime_dir = dir_.path();
    cfg.simulate_gpus = 2;
    cfg.containment = "guardian";  // no cgroups of the test's own
    server_ = std::make_unique<daemon::Server>(cfg, env);
    server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  void stop() {
    if (!server_) return;
    server_->stop();
    thread_.join();
    server_.reset();
  }
  // As a crash leaves the files: whatever the stopping server would still
  // save meets a disk that takes nothing (full, every sync failing), then
  // a new server on the real disk loads what is there.
  void crash_and_restart(FaultEnv& disk) {
    disk.fill();
    disk.fail_syncs();
    stop();
    start(daemon::Env::posix());
  }

 private:
  test::TempDir dir_;
  std::unique_ptr<daemon::Server> server_;
  std::thread thread_;
};

// A daemon in this process never counts as gone, so a call it holds would
// wait the default 300 s: a hold that never ends fails the test sooner.
ClientOptions options(const InProcess& d) {
  return ClientOptions{d.endpoint(), 30s, 20s};
}

// Sets until the daemon refuses even a small one: the change log reserves
// room ahead (4 MiB at a time), which a full disk does not take back. Large
// values first, then each half as large, so that it takes a few dozen.
void use_up_reserved_room(Client& c) {
  for (size_t size = 256 * 1024; size >= 1; size /= 2) {
    for (int i = 0;; ++i) {
      REQUIRE(i < 100);  // a daemon that keeps accepting changes on a full disk
      try {
        c.set("filler", std::string(size, 'x'));
      } catch (const Error& e) {
        REQUIRE(e.code() == ErrorCode::kStorageFailed);
        break;
      }
    }
  }
}

}  // namespace

TEST_CASE("an I/O error while saving holds the acknowledgement until a save works") {
  FaultEnv disk;
  InProcess d(disk);
  Client c(options(d));
  c.join({"eio", 1, false, -1});
  c.set("a", "1");
  Client other(options(d));
  other.join({"eio", 1, false, -1});
  disk.fail_syncs();  // from now on every sync fails with EIO
  std::atomic<bool> done{false};
  std::string error;
  std::thread writer([&] {
    try {
      c.set("b", "2");
    } catch (const Error& e) {
      error = e.what();
    }
    done = true;
  });
  // Not acknowledged while it cannot be made durable (libmuster resends
  // meanwhile; the resend is held as well).
  std::this_thread::sleep_for(2s);
  CHECK_FALSE(done);
  CHECK(disk.syncs_failed() > 0);
  // Once a save failed that way, a new change is refused at once and
  // changes nothing.
  try {
    other.set("c", "3");
    FAIL("a change was acknowledged while every sync fails");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kStorageFailed);
    CHECK_THAT(e.what(), Catch::Contains("Input/output error"));
  }
  disk.heal();  // the disk recovers: the next save works
  CHECK(test::eventually([&] { return done.load(); }, 10s));
  writer.join();
  CHECK(error.empty());
  d.crash_and_restart(disk);
  Client after(options(d));
  after.join({"eio", 1, false, -1});
  CHECK(after.get("a", 0ms) == "1");
  CHECK(after.get("b", 0ms) == "2");
  CHECK(code_of([&] { after.get("c", 0ms); }) == ErrorCode::kNotFound);
}

TEST_CASE("one failed sync delays the acknowledgement until the retried save works") {
  FaultEnv disk;
  InProcess d(disk);
  Client c(options(d));
  c.join({"once", 1, false, -1});
  c.set("a", "1");
  disk.fail_syncs(EIO, 1);
  // The log that failed its sync is trusted no more: the server retries
  // with a new snapshot (every 100 ms) and answers once that is durable.
  c.set("b", "2");
  CHECK(disk.syncs_failed() == 1);
  CHECK(c.get("b", 0ms) == "2");
  d.crash_and_restart(disk);
  Client after(options(d));
  after.join({"once", 1, false, -1});
  CHECK(after.get("a", 0ms) == "1");
  CHECK(after.get("b", 0ms) == "2");
}

TEST_CASE(
    "a full disk refuses changes with ENOSPC, keeps reads, and takes changes once it has room") {
  FaultEnv disk;
  InProcess d(disk);
  Client c(options(d));
  c.join({"kv", 1, false, -1});
  c.set("before", "1");
  REQUIRE(c.add("n", 5) == 5);

  disk.fill();
  use_up_reserved_room(c);
  CHECK(disk.writes_refused() > 0);
  // Each change is refused with the code and a sentence that names the
  // directory, and nothing changes.
  try {
    c.set("during", "x");
    FAIL("a set was acknowledged on a full disk");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kStorageFailed);
    CHECK_THAT(e.what(), Catch::Contains(d.dir()));
    CHECK_THAT(e.what(), Catch::Contains("No space left on device"));
  }
  CHECK(code_of([&] { c.add("n", 1); }) == ErrorCode::kStorageFailed);
  CHECK(code_of([&] {
          Client joiner(options(d));
          joiner.join({"other", 1, false, -1});
        }) == ErrorCode::kStorageFailed);
  // Reads keep working, and show nothing of the refused changes.
  CHECK(c.get("before", 0ms) == "1");
  CHECK(c.get("n", 0ms) == "5");
  CHECK(code_of([&] { c.get("during", 0ms); }) == ErrorCode::kNotFound);

  disk.heal();  // room again: no restart needed
  c.set("after", "2");
  CHECK(c.add("n", 1) == 6);
  d.crash_and_restart(disk);
  Client after(options(d));
  after.join({"kv", 1, false, -1});
  CHECK(after.get("before", 0ms) == "1");
  CHECK(after.get("after", 0ms) == "2");
  CHECK(after.get("n", 0ms) == "6");
  CHECK(code_of([&] { after.get("during", 0ms); }) == ErrorCode::kNotFound);
}
