// torch's newer Store API and num_keys in musterd's store, through the C++
// client and the C ABI, against a private daemon (no torch needed). The
// semantics are torch's: test/distributed/test_store.py in pytorch/pytorch
// (commit f34fa1515024423a239ce26f33a8b65ea9252502): test_append,
// test_multi_set, test_multi_get, test_queues, test_queues_nonblocking,
// test_queues_bidirectional, test_queues_timeout, test_clone, and
// TCPStoreTest.test_numkeys_delkeys.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "muster/client.hpp"
#include "muster/muster.h"
#include "support/error_code.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::code_of;
using test::TestDaemon;

namespace {

Client joined(const TestDaemon& d, const std::string& job = "kv") {
  Client c(ClientOptions{d.endpoint()});
  c.join({job, 1, false, -1});
  return c;
}

}  // namespace

TEST_CASE("num_keys and list_keys count and list the keys under a prefix") {
  TestDaemon d;
  Client c = joined(d);
  CHECK(c.num_keys() == 0);
  c.set("a/1", "x");
  c.add("a/2", 1);
  c.set("b/1", "y");
  CHECK(c.num_keys("a/") == 2);
  CHECK(c.num_keys() == 3);
  CHECK(c.list_keys("a/") == std::vector<std::string>{"a/1", "a/2"});
  CHECK(c.remove("a/1"));
  CHECK(c.num_keys("a/") == 1);
  CHECK(c.list_keys() == std::vector<std::string>{"a/2", "b/1"});
}

TEST_CASE("append, multi_set and multi_get do what torch's do") {
  TestDaemon d;
  Client c = joined(d);
  // test_append
  c.set("foo", "po");
  c.append("foo", "tato");
  c.append("bar", "po");
  c.append("bar", "tato");
  CHECK(c.get("foo") == "potato");
  CHECK(c.get("bar") == "potato");
  // test_multi_set, test_multi_get
  c.multi_set({"m1", "m2"}, {"po", "tato"});
  CHECK(c.get("m1") == "po");
  CHECK(c.multi_get({"m2", "m1"}) == std::vector<std::string>{"tato", "po"});
  CHECK(code_of([&] { c.multi_set({"x"}, {}); }) == ErrorCode::kInvalidArgument);
  CHECK(code_of([&] { c.multi_get({"m1", "absent"}, 0ms); }) == ErrorCode::kNotFound);
  CHECK(code_of([&] { c.multi_get({"m1", "absent"}, 100ms); }) == ErrorCode::kTimeout);

  // A multi_get waits until every key is set (here by a clone, from
  // another thread, the way torch's tests use clone()).
  Client other = c.clone();
  std::thread setter([&] {
    other.set("late1", "a");
    other.set("late2", "b");
  });
  auto got = c.multi_get({"late1", "late2"}, 30s);
  setter.join();
  CHECK(got == std::vector<std::string>{"a", "b"});
}

TEST_CASE("queues: push, pop in order, len, empty, timeout, and a pop parked for a push") {
  TestDaemon d;
  Client c = joined(d);
  // test_queues
  CHECK(c.queue_len("q") == 0);
  CHECK_FALSE(c.try_get("q").has_value());
  c.queue_push("q", "1");
  c.queue_push("q", "2");
  CHECK(c.queue_len("q") == 2);
  c.wait({"q"}, 1s);  // the key exists while the queue is not empty
  CHECK(c.queue_pop("q") == "1");
  CHECK(c.queue_pop("q") == "2");
  CHECK(c.queue_len("q") == 0);
  CHECK(c.num_keys() == 0);
  // test_queues_nonblocking, test_queues_timeout
  CHECK(code_of([&] { c.queue_pop("q", 0ms); }) == ErrorCode::kNotFound);
  CHECK(code_of([&] { c.queue_pop("q", 50ms); }) == ErrorCode::kTimeout);
  c.queue_push("q", std::string("\0a", 2));
  CHECK(c.queue_pop("q", 0ms) == std::string("\0a", 2));
  // A plain value is no queue: refused, and left as it was.
  c.set("plain", "xyz");
  CHECK(code_of([&] { c.queue_pop("plain", 0ms); }) == ErrorCode::kInvalidArgument);
  CHECK(code_of([&] { c.queue_push("plain", "1"); }) == ErrorCode::kInvalidArgument);
  CHECK(c.get("plain") == "xyz");

  // test_queues_bidirectional: two clones, each waiting for the other's push.
  Client a = c.clone(), b = c.clone();
  std::string a_got, b_got;
  std::thread ta([&] {
    a.queue_push("to_b", "a1");
    a_got = a.queue_pop("to_a", 30s);
  });
  std::thread tb([&] {
    b_got = b.queue_pop("to_b", 30s);
    b.queue_push("to_a", "b1");
  });
  ta.join();
  tb.join();
  CHECK(a_got == "b1");
  CHECK(b_got == "a1");
}

TEST_CASE("the new store requests that grow the store are held to its quotas") {
  TestDaemon d({"--max-store-bytes", "64", "--max-store-keys", "3"});
  Client c = joined(d);
  c.set("k", std::string(40, 'x'));
  CHECK(code_of([&] { c.append("k", std::string(40, 'y')); }) == ErrorCode::kQuotaExceeded);
  CHECK(code_of([&] { c.queue_push("q", std::string(40, 'y')); }) == ErrorCode::kQuotaExceeded);
  CHECK(code_of([&] {
          c.multi_set({"a", "b", "c"}, {"1", "2", "3"});
        }) == ErrorCode::kQuotaExceeded);
  // Refused whole: nothing of it was stored.
  CHECK(c.num_keys() == 1);
  CHECK(c.get("k") == std::string(40, 'x'));
  c.multi_set({"a", "b"}, {"1", "2"});
  CHECK(c.num_keys() == 3);
}

TEST_CASE("appends, multi_sets, queue pushes and pops survive a daemon restart") {
  TestDaemon d;
  Client c = joined(d);
  c.append("ap", "po");
  c.append("ap", "tato");
  c.multi_set({"m1", "m2"}, {"x", "y"});
  c.queue_push("q", "1");
  c.queue_push("q", "2");
  c.queue_push("q", "3");
  CHECK(c.queue_pop("q") == "1");

  d.kill9();
  d.start();

  CHECK(c.get("ap", 5s) == "potato");
  CHECK(c.multi_get({"m1", "m2"}) == std::vector<std::string>{"x", "y"});
  CHECK(c.queue_len("q") == 2);
  CHECK(c.queue_pop("q") == "2");
}

TEST_CASE("the C ABI's store calls") {
  TestDaemon d;
  muster_client* c = muster_client_new(d.endpoint().c_str());
  REQUIRE(c != nullptr);
  REQUIRE(muster_join(c, "capi", 1, 0, -1, nullptr) == 0);
  REQUIRE(muster_store_append(c, "k", "po", 2) == 0);
  REQUIRE(muster_store_append(c, "k", "tato", 4) == 0);
  const char* keys[] = {"a", "b"};
  const void* values[] = {"1", "22"};
  size_t lens[] = {1, 2};
  REQUIRE(muster_store_multi_set(c, keys, values, lens, 2) == 0);
  void* got[2] = {};
  size_t got_lens[2] = {};
  REQUIRE(muster_store_multi_get(c, keys, 2, 1000, got, got_lens) == 0);
  CHECK(std::string(static_cast<char*>(got[1]), got_lens[1]) == "22");
  muster_free(got[0]);
  muster_free(got[1]);
  int64_t n = -1;
  REQUIRE(muster_store_num_keys(c, nullptr, &n) == 0);
  CHECK(n == 3);
  char** names = nullptr;
  size_t count = 0;
  REQUIRE(muster_store_list_keys(c, "", &names, &count) == 0);
  REQUIRE(count == 3);
  CHECK(std::string(names[0]) == "a");
  CHECK(std::string(names[2]) == "k");
  for (size_t i = 0; i < count; ++i) muster_free(names[i]);
  muster_free(names);

  REQUIRE(muster_store_queue_push(c, "q", "x", 1) == 0);
  REQUIRE(muster_store_queue_len(c, "q", &n) == 0);
  CHECK(n == 1);
  muster_client* other = muster_client_clone(c);
  REQUIRE(other != nullptr);
  void* item = nullptr;
  size_t len = 0;
  REQUIRE(muster_store_queue_pop(other, "q", 1000, &item, &len) == 0);
  CHECK(std::string(static_cast<char*>(item), len) == "x");
  muster_free(item);
  CHECK(muster_store_queue_pop(other, "q", 0, &item, &len) ==
        static_cast<int>(ErrorCode::kNotFound));
  CHECK(std::strstr(muster_error_message(other), "empty") != nullptr);
  muster_client_free(other);
  muster_client_free(c);
}
