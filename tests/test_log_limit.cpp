// The log's rate limit (common/log_limit.hpp): a kind of line (its job and
// shape) writes a burst per interval, the rest are counted and summed up
// in one line; other kinds and other jobs are not held up by it.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "log_limit.hpp"

using muster::log::line_kind;
using muster::log::RateLimiter;
using Clock = RateLimiter::Clock;
using namespace std::chrono_literals;

TEST_CASE("a flood of one kind is cut to its burst and summed up once the interval ends") {
  RateLimiter lim(5, 10s);
  std::vector<std::string> said;
  auto say = [&](const std::string& s) { said.push_back(s); };
  auto t = Clock::now();
  auto kind = line_kind(muster::log::Level::kWarning, "job=a stuck: key 'k1' for 3 s", {});
  int written = 0;
  for (int i = 0; i < 100; ++i) written += lim.allow(kind, t, say);
  CHECK(written == 5);
  CHECK(said.empty());
  CHECK(lim.suppressed() == 95);
  // Another job's lines of the same shape have their own burst.
  auto other = line_kind(muster::log::Level::kWarning, "job=b stuck: key 'k1' for 3 s", {});
  CHECK(lim.allow(other, t, say));
  // After the interval: the summary first, then lines again.
  CHECK(lim.allow(kind, t + 11s, say));
  REQUIRE(said.size() == 1);
  CHECK(said[0].find("95 similar line(s) suppressed") == 0);
  CHECK(said[0].find("job=a") != std::string::npos);
}

TEST_CASE("lines that differ only in numbers and quoted text are one kind") {
  using muster::log::Level;
  CHECK(line_kind(Level::kWarning, "job=x stuck: rank 3 waits for key 'aaa' for 12 s", {}) ==
        line_kind(Level::kWarning, "job=x stuck: rank 7 waits for key 'bbbbb' for 1 s", {}));
  CHECK(line_kind(Level::kWarning, "job=x stuck: a", {}) !=
        line_kind(Level::kWarning, "job=y stuck: a", {}));
  CHECK(line_kind(Level::kWarning, "job=x stuck: a", {}) !=
        line_kind(Level::kNotice, "job=x stuck: a", {}));
  muster::log::Fields f;
  f.job = "z";
  CHECK(line_kind(Level::kInfo, "something happened", f) !=
        line_kind(Level::kInfo, "something happened", {}));
}

TEST_CASE("the table of kinds is bounded: past it, kinds share one budget") {
  RateLimiter lim(2, 10s, 4);
  auto t = Clock::now();
  auto say = [](const std::string&) {};
  int written = 0;
  for (int i = 0; i < 100; ++i)
    written += lim.allow("job" + std::to_string(i) + std::string(1, '\0') + "6 x", t, say);
  // One line each for the first 4 kinds; the 96 others share a burst of 2.
  CHECK(written == 4 + 2);
}
