// Hostile users (issue #42), attack class 4: a user's text reaches another
// reader escaped. A barrier name with terminal escape sequences and a
// forged log line shows escaped in `muster status` (the table and --watch
// alike: both print through status_print) and in the daemon's log on
// stderr and in the file sink, where it can start no line, field or entry
// of its own.
#include <catch2/catch.hpp>

#include <thread>

#include "muster/client.hpp"
#include "stuck_support.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::eventually;
using test::LoggedDaemon;
using test::muster_status;
using test::TestDaemon;

namespace {

// Set the terminal's title, clear the screen, then a forged status line
// and a forged log line of musterd's at emergency level.
const std::string kEvil =
    "\x1b]0;pwned\x07\x1b[2J\x1b[H"
    "musterd OK\n<0>musterd: job=rootjob uid 0\n\nMESSAGE=forged\nPRIORITY=0\xe2\x80\xae";
const std::string kEscaped =
    "\\e]0;pwned\\a\\e[2J\\e[Hmusterd OK\\n<0>musterd: job=rootjob uid "
    "0\\n\\nMESSAGE=forged\\nPRIORITY=0\\u202E";

// One rank of a two-rank job that waits at the evil barrier for `wait`.
std::thread evil_rank(const std::string& endpoint, std::chrono::milliseconds wait) {
  return std::thread([endpoint, wait] {
    try {
      Client c({endpoint});
      c.join({"evil", 2, false, 0});
      c.barrier(kEvil, wait);
    } catch (const Error&) {
      // The barrier times out: the test only needs it open meanwhile.
    }
  });
}

}  // namespace

TEST_CASE("hostile: a barrier name with escape sequences is escaped in muster status and stderr") {
  LoggedDaemon d({"--stuck-after", "1"});
  auto rank = evil_rank(d.endpoint, 6s);
  test::Ran st;
  REQUIRE(eventually(
      [&] {
        st = muster_status(d.endpoint, {});
        return st.out.find("STUCK") != std::string::npos;
      },
      20s));
  INFO(st.out);
  CHECK(st.out.find(kEscaped) != std::string::npos);
  CHECK(st.out.find('\x1b') == std::string::npos);
  CHECK(st.out.find("\nmusterd OK") == std::string::npos);
  // The daemon's stuck line: one line, escaped; no forged line of its own.
  CHECK(d.count("stuck", 3s) >= 1);
  for (const auto& line : d.log) {
    INFO(line);
    CHECK(line.find('\x1b') == std::string::npos);
    CHECK(line.rfind("<0>", 0) != 0);
    CHECK(line.rfind("musterd OK", 0) != 0);
  }
  CHECK(d.count(kEscaped, 0ms) >= 1);
  rank.join();
}

TEST_CASE("hostile: a barrier name cannot forge a field or an entry in the file log sink") {
  test::TempDir t;
  const std::string journal = t.path() + "/journal";
  TestDaemon d({"--stuck-after", "1", "--log-level", "info"},
               {{"MUSTER_LOG_SINK", "file:" + journal}});
  auto rank = evil_rank(d.endpoint(), 4s);
  REQUIRE(eventually([&] { return test::slurp(journal).find("stuck") != std::string::npos; }, 20s));
  rank.join();
  const std::string text = test::slurp(journal);
  INFO(text);
  CHECK(text.find(kEscaped) != std::string::npos);
  // Every entry's lines are fields of the daemon's: none the user wrote.
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty()) continue;
    INFO(line);
    CHECK((line.rfind("MESSAGE=", 0) == 0 || line.rfind("PRIORITY=", 0) == 0 ||
           line.rfind("SYSLOG_IDENTIFIER=musterd", 0) == 0 || line.rfind("JOB=", 0) == 0 ||
           line.rfind("RANK=", 0) == 0 || line.rfind("GPU=", 0) == 0 ||
           line.rfind("PEER=", 0) == 0));
    CHECK(line != "MESSAGE=forged");
    CHECK(line != "PRIORITY=0");
  }
}
