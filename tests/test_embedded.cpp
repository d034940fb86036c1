// The embedded daemon's end: the launcher that started it releases it when
// it will start no more workers (no lingering after the last job), but a
// daemon that serves another launcher's job stays until that job ends.
#include <catch2/catch.hpp>

#include <unistd.h>

#include "support/muster_cli.hpp"
#include "support/process.hpp"

using namespace std::chrono_literals;
using muster::test::Process;
namespace test = muster::test;

TEST_CASE("a launcher's release leaves the embedded daemon to another launcher's job") {
  test::TempDir dir;
  auto env = test::embedded_env(dir.path());
  std::string sock = dir.path() + "/musterd.sock";
  // A starts the daemon and ends first; B's job uses A's daemon meanwhile.
  Process a(test::muster_cmd("run", {"-n", "1", "--cpu", "/bin/sh", "-c", "echo up; sleep 1"}),
            env);
  REQUIRE(a.read_line(20s).value_or("") == "[rank0]: up");
  Process b(test::muster_cmd("run", {"-n", "1", "--cpu", "--job-id", "jobb", "/bin/sh", "-c",
                                     "echo up; sleep 4; echo done"}),
            env);
  REQUIRE(b.read_line(20s).value_or("") == "[rank0]: up");
  CHECK(a.wait(10s) == 0);
  // A released its daemon on the way out; B's job keeps it serving.
  Process status({test::program("MUSTER_TEST_MUSTER"), "status"},
                 {{"MUSTER_ENDPOINT", "ipc://" + sock}}, true);
  auto text = status.read_all(10s);
  CHECK(status.wait(10s) == 0);
  CHECK_THAT(text, Catch::Contains("jobb"));
  CHECK(b.read_line(20s).value_or("") == "[rank0]: done");
  CHECK(b.wait(10s) == 0);
  // With no job left (and B not its starter) the daemon goes after its
  // linger.
  CHECK(test::eventually([&] { return access(sock.c_str(), F_OK) != 0; }, 5s));
}

TEST_CASE("a released embedded daemon is gone when its launcher exits") {
  test::TempDir dir;
  Process a(test::muster_cmd("run", {"-n", "2", "--cpu", "/bin/true"}),
            test::embedded_env(dir.path()));
  CHECK(a.wait(20s) == 0);
  CHECK(access((dir.path() + "/musterd.sock").c_str(), F_OK) != 0);
}
