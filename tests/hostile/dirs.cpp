// Hostile users (issue #42), attack class 5: a directory the daemon writes
// is its own. Planted as a symbolic link, owned by another user, or
// writable by others, it is refused with a sentence before anything is
// written there; the files in an accepted one are made relative to the
// descriptor the daemon checked, so a link planted at its path afterwards
// leads nowhere.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "muster/client.hpp"
#include "support/as_user.hpp"
#include "support/process.hpp"
#include "support/skip.hpp"

using namespace muster;
using namespace std::chrono_literals;
using namespace muster::test;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// musterd with --job-mapping-dir mapping, until it exits (within 10 s):
// its exit code and output.
std::pair<std::optional<int>, std::string> run_with_mapping(const std::string& mapping) {
  TempDir rt;
  Process p({program("MUSTER_TEST_MUSTERD"), "--runtime-dir", rt.path() + "/rt", "--no-config",
             "--simulate-gpus", "1", "--job-mapping-dir", mapping},
            {}, true);
  auto code = p.wait(10s);
  if (!code) p.signal(SIGKILL);
  return {code, code ? p.read_all(1s) : "(still running)"};
}

// musterd refuses --job-mapping-dir mapping: it exits 1, saying why.
void check_refused(const std::string& mapping, const std::string& why) {
  auto [code, out] = run_with_mapping(mapping);
  INFO(out);
  CHECK(code == 1);
  CHECK(contains(out, why));
}

// A new directory `name` in t with this mode (set past the umask).
std::string dir_with_mode(const TempDir& t, const std::string& name, mode_t mode) {
  std::string dir = t.path() + "/" + name;
  REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
  REQUIRE(::chmod(dir.c_str(), mode) == 0);
  return dir;
}

// A new directory "theirs" in t, nobody's (0755).
std::string nobodys_dir(const TempDir& t) {
  std::string theirs = dir_with_mode(t, "theirs", 0755);
  REQUIRE(::chown(theirs.c_str(), kNobody, kNobody) == 0);
  return theirs;
}

size_t entries(const std::string& dir) {
  size_t n = 0;
  for (const auto& name : {"0", "0.tmp", "1"})
    n += ::access((dir + "/" + name).c_str(), F_OK) == 0 ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("hostile: a job mapping directory planted as a symbolic link is refused") {
  TempDir t;
  // The attacker's link, to a directory the daemon's user owns (0700): the
  // daemon would write and delete files there.
  std::string target = t.path() + "/private", link = t.path() + "/mapping";
  REQUIRE(::mkdir(target.c_str(), 0700) == 0);
  REQUIRE(::symlink(target.c_str(), link.c_str()) == 0);
  if (root()) ::lchown(link.c_str(), kNobody, kNobody);
  auto [code, out] = run_with_mapping(link);
  INFO(out);
  CHECK(code == 1);
  CHECK(contains(out, "refusing job mapping directory " + link + ": it is a symbolic link"));
  CHECK(contains(out, "--job-mapping-dir"));
  CHECK(entries(target) == 0);
}

TEST_CASE("hostile: a job mapping directory others may write, or another user's, is refused") {
  TempDir t;
  const std::string open = dir_with_mode(t, "open", 0777);
  check_refused(open, "refusing job mapping directory " + open + ": its mode 0777");
  if (!test::root_for("make another user's directory", true)) return;
  const std::string theirs = nobodys_dir(t);
  check_refused(theirs, "refusing job mapping directory " + theirs + ": it is owned by uid 65534");
}

TEST_CASE("hostile: a job mapping directory below one that others may rename in is refused") {
  TempDir t;
  // World-writable without the sticky bit: anyone may rename the mapping
  // directory away and put a link to one of root's in its place.
  const std::string open = dir_with_mode(t, "open", 0777);
  check_refused(open + "/mapping", "refusing job mapping directory " + open +
                                       "/mapping: the directory above it, " + open +
                                       ", has mode 0777");
  CHECK(::access((open + "/mapping/0").c_str(), F_OK) != 0);
  // With the sticky bit (as /tmp), nobody may rename what is not theirs.
  REQUIRE(::chmod(open.c_str(), 01777) == 0);
  CHECK_NOTHROW(TestDaemon({"--job-mapping-dir", open + "/mapping"}));
  if (!test::root_for("make another user's directory", true)) return;
  const std::string theirs = nobodys_dir(t);
  check_refused(theirs + "/mapping",
                "the directory above it, " + theirs + ", is owned by uid 65534");
}

TEST_CASE("hostile: a link planted at the mapping directory's path later is not written through") {
  TempDir t;
  std::string mapping = t.path() + "/mapping", moved = t.path() + "/moved",
              target = t.path() + "/private";
  REQUIRE(::mkdir(target.c_str(), 0700) == 0);
  TestDaemon d({"--simulate-gpus", "1", "--job-mapping-dir", mapping});
  // The checked directory moves away and a link takes its path: the daemon
  // keeps writing into the directory it checked, wherever it now is.
  REQUIRE(::rename(mapping.c_str(), moved.c_str()) == 0);
  REQUIRE(::symlink(target.c_str(), mapping.c_str()) == 0);
  Client c({d.endpoint()});
  c.join({"mapped", 1, true, 0});
  CHECK(test::eventually([&] { return test::slurp_or_missing(moved + "/0") == "mapped\n"; }, 10s));
  CHECK(entries(target) == 0);
  c.leave();
  CHECK(test::eventually([&] { return test::slurp_or_missing(moved + "/0") == "<missing>"; }, 10s));
  CHECK(entries(target) == 0);
}

TEST_CASE("hostile: the state directory swapped for a link after start is not written through") {
  TempDir t;
  std::string state = t.path() + "/state", moved = t.path() + "/moved",
              target = t.path() + "/private";
  REQUIRE(::mkdir(target.c_str(), 0700) == 0);
  TestDaemon d({"--state-dir", state});
  // The checked directory moves away and a link takes its path: the state
  // (the snapshot, the change log) goes on into the directory checked at
  // start, none of it through the link.
  REQUIRE(::rename(state.c_str(), moved.c_str()) == 0);
  REQUIRE(::symlink(target.c_str(), state.c_str()) == 0);
  const std::string before = test::slurp_or_missing(moved + "/state.log");
  Client c({d.endpoint()});
  c.join({"saved", 1, false, 0});
  c.set("k", std::string(4096, 'v'));
  CHECK(test::eventually(
      [&] {
        auto now = test::slurp_or_missing(moved + "/state.log");
        return now != before && now.find(std::string(4096, 'v')) != std::string::npos;
      },
      10s));
  for (const char* name : {"state.msgpack", "state.msgpack.tmp", "state.log", "state.log.tmp"})
    CHECK(::access((target + "/" + name).c_str(), F_OK) != 0);
  c.leave();
}
