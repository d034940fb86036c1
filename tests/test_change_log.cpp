// The change log (daemon/persist/change_log.hpp) read back after every way
// a crash or a bad disk can leave it: cut at any byte, a byte flipped, a log
// of another epoch. Replay gives exactly the commits before the damage, each
// commit's records all or none. And written on a disk that fails
// (support/fault_env.hpp): full halfway through a commit, or failing a sync.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "persist/change_log.hpp"
#include "support/fault_env.hpp"
#include "support/process.hpp"

using muster::daemon::ChangeLog;
using muster::test::slurp;
using muster::test::spit;

namespace {

std::vector<std::string> replayed(const std::string& dir, uint64_t epoch, bool* found, bool* torn) {
  std::vector<std::string> got;
  uint64_t end = 0;
  *found = ChangeLog::replay(
      {dir}, epoch,
      [&](uint8_t type, std::string_view payload) {
        got.push_back(std::to_string(type) + ":" + std::string(payload));
      },
      &end, torn);
  return got;
}

}  // namespace

TEST_CASE("a change log replays its records up to the first damaged one") {
  muster::test::TempDir dir;
  ChangeLog log({dir.path()});
  std::string why;
  REQUIRE(log.start(7, &why));
  std::vector<std::string> want;
  // Two commits: records of one round are written together.
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 5; ++i) {
      std::string payload(static_cast<size_t>(i * 37 + round), static_cast<char>('a' + i));
      REQUIRE(log.reserve(payload.size() + 16, &why));
      log.append(static_cast<uint8_t>(i + 1), payload);
      want.push_back(std::to_string(i + 1) + ":" + payload);
    }
    REQUIRE(log.commit(&why));
  }
  std::string bytes = slurp(log.path());
  REQUIRE(bytes.size() == log.size());
  bool found = false, torn = true;
  CHECK(replayed(dir.path(), 7, &found, &torn) == want);
  CHECK(found);
  CHECK_FALSE(torn);

  SECTION("another epoch's log is not replayed") {
    CHECK(replayed(dir.path(), 8, &found, &torn).empty());
    CHECK_FALSE(found);
  }
  SECTION("cut at every byte: the whole commits before the cut, each all or nothing") {
    // Where each commit ends: the header's, then the two rounds'.
    std::vector<size_t> ends;
    for (size_t at = 0; at < bytes.size();) {
      uint32_t len = 0;
      for (int i = 3; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(bytes[at + i]);
      at += 8 + len;
      ends.push_back(at);
    }
    REQUIRE(ends.size() == 3);
    const size_t records_before[] = {0, 0, 5, 10};  // by whole commits
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      spit(log.path(), bytes.substr(0, cut));
      auto got = replayed(dir.path(), 7, &found, &torn);
      size_t whole = 0;
      while (whole < ends.size() && ends[whole] <= cut) ++whole;
      INFO("cut at " << cut);
      if (whole == 0) {
        CHECK_FALSE(found);  // not even the header
        continue;
      }
      CHECK(found);
      CHECK(got == std::vector<std::string>(want.begin(), want.begin() + records_before[whole]));
      CHECK(torn == (cut != ends[whole - 1]));
    }
  }
  SECTION("a flipped byte ends the replay before its commit") {
    for (size_t at = 40; at < bytes.size(); at += 13) {
      std::string bad = bytes;
      bad[at] = static_cast<char>(bad[at] ^ 0x40);
      spit(log.path(), bad);
      auto got = replayed(dir.path(), 7, &found, &torn);
      INFO("flipped byte " << at);
      REQUIRE(got.size() <= want.size());
      CHECK(got == std::vector<std::string>(want.begin(), want.begin() + got.size()));
      CHECK((got.size() == 0 || got.size() == 5));  // whole commits only
      CHECK(torn);
    }
  }
  SECTION("resumed after a torn tail, new records follow the intact ones") {
    spit(log.path(), bytes.substr(0, bytes.size() - 3));
    uint64_t end = 0;
    std::vector<std::string> got;
    REQUIRE(ChangeLog::replay(
        {dir.path()}, 7, [&](uint8_t, std::string_view) {}, &end, &torn));
    ChangeLog again({dir.path()});
    REQUIRE(again.resume(end, &why));
    again.append(9, "after");
    REQUIRE(again.commit(&why));
    got = replayed(dir.path(), 7, &found, &torn);
    // The torn commit (the second round) is gone whole.
    std::vector<std::string> expect(want.begin(), want.begin() + 5);
    expect.push_back("9:after");
    CHECK(got == expect);
    CHECK_FALSE(torn);
  }
}

TEST_CASE("a commit the disk cannot take leaves the log as it was; after a failed sync, none") {
  muster::test::TempDir dir;
  muster::test::FaultEnv disk;
  ChangeLog log({dir.path(), AT_FDCWD, &disk});
  std::string why;
  REQUIRE(log.start(3, &why));
  log.append(1, "first");
  REQUIRE(log.commit(&why));
  const uint64_t durable = log.size();
  bool found = false, torn = true;

  SECTION("full halfway: cut back to the last commit, the records kept for the next try") {
    // Room reserved ahead (a chunk of 4 MiB), then a commit larger than it:
    // the disk takes part of it and then has no more.
    REQUIRE(log.reserve(16, &why));
    disk.fill();
    const std::string big(5u << 20, 'b');
    log.append(2, big);
    CHECK_FALSE(log.commit(&why));
    CHECK_THAT(why, Catch::Contains("No space left on device"));
    CHECK(disk.writes_refused() > 0);
    CHECK(slurp(log.path()).size() == durable);  // no half commit in front of the next
    CHECK(log.size() == durable);
    CHECK(log.pending());
    CHECK_FALSE(log.broken());
    CHECK(replayed(dir.path(), 3, &found, &torn) == std::vector<std::string>{"1:first"});
    CHECK_FALSE(torn);
    disk.heal();
    REQUIRE(log.commit(&why));
    CHECK(replayed(dir.path(), 3, &found, &torn) ==
          std::vector<std::string>{"1:first", "2:" + big});
    CHECK_FALSE(torn);
  }
  SECTION("a failed sync: the log is used no more, even once syncs work, until started again") {
    disk.fail_syncs(EIO, 1);
    log.append(2, "second");
    CHECK_FALSE(log.commit(&why));
    CHECK_THAT(why, Catch::Contains("Input/output error"));
    CHECK(disk.syncs_failed() == 1);
    CHECK(log.broken());
    log.append(3, "third");
    CHECK_FALSE(log.commit(&why));
    CHECK(log.broken());
    REQUIRE(log.start(4, &why));
    CHECK_FALSE(log.broken());
    log.append(5, "fifth");
    REQUIRE(log.commit(&why));
    CHECK(replayed(dir.path(), 4, &found, &torn) == std::vector<std::string>{"5:fifth"});
  }
}
