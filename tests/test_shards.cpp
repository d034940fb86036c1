// Sampler shards served by a private musterd, checked against the verified
// local reimplementation (shard_indices) and torch's own fixtures.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "muster/client.hpp"
#include "muster/muster.h"
#include "protocol/envelope.hpp"
#include "sampler/sampler.hpp"
#include "support/process.hpp"
#include "support/raw.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::TestDaemon;
using Opts = Client::ShardOptions;

namespace {

// World ranks held by one process, one Client per rank (a Client is not
// thread-safe), each joined with an explicit local rank.
struct World {
  std::string job;
  std::vector<std::unique_ptr<Client>> ranks;
  World(const TestDaemon& d, const std::string& job_id, uint32_t n) : job(job_id) {
    for (uint32_t r = 0; r < n; ++r) {
      ranks.push_back(std::make_unique<Client>(ClientOptions{d.endpoint()}));
      auto info = ranks.back()->join({job, n, false, static_cast<int>(r)});
      REQUIRE(info.rank == r);
    }
  }
  uint32_t size() const { return static_cast<uint32_t>(ranks.size()); }

  // Every rank fetches its shard from its own thread, all at once.
  std::vector<std::vector<int64_t>> fetch(const Opts& o) {
    std::vector<std::vector<int64_t>> out(size());
    std::vector<std::string> errors(size());
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < size(); ++r)
      threads.emplace_back([&, r] {
        try {
          out[r] = ranks[r]->sampler_shard(o);
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (uint32_t r = 0; r < size(); ++r) {
      INFO("rank " << r);
      REQUIRE(errors[r] == "");
    }
    return out;
  }
};

ShardSpec spec_of(const Opts& o, uint32_t world, uint32_t rank) {
  ShardSpec s;
  s.dataset_size = o.dataset_size;
  s.epoch = o.epoch;
  s.seed = o.seed;
  s.shuffle = o.shuffle;
  s.drop_last = o.drop_last;
  s.consumed = o.consumed;
  s.num_replicas = world;
  s.rank = rank;
  return s;
}

std::string first_difference(const std::vector<int64_t>& got, const std::vector<int64_t>& want) {
  if (got == want) return "";
  std::ostringstream out;
  out << "sizes " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    if (got[i] != want[i]) {
      out << "; first difference at " << i << ": got " << got[i] << ", want " << want[i];
      break;
    }
  return out.str();
}

// Fetches from every rank and compares with shard_indices; returns the shards.
std::vector<std::vector<int64_t>> check_world(World& w, const Opts& o) {
  INFO("n=" << o.dataset_size << " epoch=" << o.epoch << " seed=" << o.seed
            << " shuffle=" << o.shuffle << " drop_last=" << o.drop_last << " world=" << w.size());
  auto got = w.fetch(o);
  for (uint32_t r = 0; r < w.size(); ++r) {
    INFO("rank " << r);
    CHECK(first_difference(got[r], shard_indices(spec_of(o, w.size(), r))) == "");
  }
  return got;
}

std::string fixtures_dir() {
  if (const char* env = std::getenv("MUSTER_FIXTURES_DIR")) return env;
  return "tests/fixtures";
}

}  // namespace

TEST_CASE("shard messages round-trip and reject inconsistent replies", "[shards]") {
  proto::Shard m{"job-1", 3, 12345, 7, (uint64_t{1} << 40) + 9, false, true};
  auto frame = proto::encode(1, m);
  auto env = proto::decode_envelope(frame.data(), frame.size());
  CHECK(env.type == 20);
  CHECK(std::string(proto::type_name(env.type)) == "shard");
  CHECK(proto::Shard::unpack(env.payload) == m);

  proto::ShardReply r{2, 4, std::string("\x01\0\0\0\x02\0\0\0", 8)};
  frame = proto::encode(2, r);
  env = proto::decode_envelope(frame.data(), frame.size());
  CHECK(env.type == 110);
  CHECK(std::string(proto::type_name(env.type)) == "shard_reply");
  CHECK(proto::ShardReply::unpack(env.payload) == r);

  auto bad = [](const proto::ShardReply& x) {
    auto f = proto::encode(3, x);
    auto e = proto::decode_envelope(f.data(), f.size());
    try {
      proto::ShardReply::unpack(e.payload);
    } catch (const Error& err) {
      return err.code();
    }
    return ErrorCode::kInternal;
  };
  CHECK(bad({3, 4, std::string(8, '\0')}) == ErrorCode::kBadMessage);  // count x width != bytes
  CHECK(bad({1, 6, std::string(6, '\0')}) == ErrorCode::kBadMessage);  // width neither 4 nor 8

  proto::Shard big = m;
  big.dataset_size = (uint64_t{1} << 40) + 1;
  frame = proto::encode(4, big);
  env = proto::decode_envelope(frame.data(), frame.size());
  CHECK_THROWS_AS(proto::Shard::unpack(env.payload), Error);
}

TEST_CASE("the daemon's shards equal DistributedSampler's in every corner", "[shards]") {
  TestDaemon d;
  World w3(d, "three", 3);
  World w5(d, "five", 5);

  SECTION("padding: n % world != 0, drop_last off, ranks cover the dataset") {
    for (uint64_t n : {10, 11, 1000, 100003}) {
      auto got = check_world(w3, {n, 0, 0, true, false});
      std::set<int64_t> seen;
      size_t total = 0;
      for (const auto& s : got) {
        seen.insert(s.begin(), s.end());
        total += s.size();
      }
      CHECK(seen.size() == n);
      CHECK(*seen.begin() == 0);
      CHECK(*seen.rbegin() == static_cast<int64_t>(n) - 1);
      CHECK(total == (n + 2) / 3 * 3);
    }
  }
  SECTION("truncation: drop_last on, ranks are disjoint") {
    for (uint64_t n : {10, 11, 1000, 100003}) {
      auto got = check_world(w3, {n, 1, 42, true, true});
      std::set<int64_t> seen;
      for (const auto& s : got) {
        CHECK(s.size() == n / 3);
        seen.insert(s.begin(), s.end());
      }
      CHECK(seen.size() == n / 3 * 3);
    }
  }
  SECTION("fewer samples than ranks, and no samples") {
    for (bool drop : {false, true})
      for (uint64_t n : {0, 1, 2, 4}) {
        auto got = check_world(w5, {n, 0, 3, true, drop});
        for (const auto& s : got) CHECK(s.size() == (drop ? 0 : (n == 0 ? 0 : 1)));
      }
  }
  SECTION("shuffle off is a strided arange, padded by cycling") {
    for (bool drop : {false, true}) {
      auto got = check_world(w5, {13, 9, 9, false, drop});
      CHECK(got[0] == (drop ? std::vector<int64_t>{0, 5} : std::vector<int64_t>{0, 5, 10}));
      CHECK(got[4] == (drop ? std::vector<int64_t>{4, 9} : std::vector<int64_t>{4, 9, 1}));
    }
  }
  SECTION("seeds at and beyond 2^32 keep torch's low 32 bits") {
    uint64_t big = (uint64_t{1} << 32) + 5;
    auto a = check_world(w3, {5000, 0, big, true, false});
    auto b = check_world(w3, {5000, 0, 5, true, false});
    CHECK(a == b);
    check_world(w3, {5000, 3, UINT64_MAX, true, false});  // seed + epoch wraps
  }
  SECTION("each epoch is a new permutation") {
    std::vector<std::vector<int64_t>> firsts;
    for (uint64_t e = 0; e < 4; ++e)
      firsts.push_back(check_world(w5, {777, e, 11, true, false})[0]);
    for (size_t i = 1; i < firsts.size(); ++i) CHECK(firsts[i] != firsts[0]);
  }
}

TEST_CASE("eviction keeps shards right over 20 epochs and across jobs", "[shards]") {
  TestDaemon d;
  World a(d, "evict-a", 4);
  World b(d, "evict-b", 2);
  for (uint64_t e = 0; e < 20; ++e) {
    check_world(a, {50000, e, 123, true, false});
    check_world(b, {30001, e, 123, true, e % 2 == 0});
    // Going back to an evicted epoch recomputes the same permutation.
    if (e % 5 == 4) check_world(a, {50000, e - 4, 123, true, false});
    // A different dataset size under the same seed is a different permutation.
    if (e % 7 == 0) check_world(a, {49999, e, 123, true, false});
  }
  // A rank asking alone (the others never do) still gets its shard.
  auto one = a.ranks[2]->sampler_shard({50000, 99, 1, true, false});
  CHECK(first_difference(one, shard_indices(spec_of({50000, 99, 1, true, false}, 4, 2))) == "");
}

TEST_CASE("a job that ends drops its permutations; a new job of the same id starts clean",
          "[shards]") {
  TestDaemon d;
  {
    World w(d, "reborn", 2);
    check_world(w, {1000, 0, 0, true, false});
    for (auto& c : w.ranks) c->leave();
  }
  World w(d, "reborn", 4);
  check_world(w, {1000, 0, 0, true, false});
}

TEST_CASE("shards of datasets over 2^32 samples come as 64-bit indices", "[shards]") {
  TestDaemon d;
  // Only the last of 4096 ranks joins: its shard of an unshuffled 2^32 + 10
  // dataset is ~1 M indices, wrapping around through the padding.
  Client c(ClientOptions{d.endpoint()});
  c.join({"wide", 4096, false, 4095});
  Opts o{(uint64_t{1} << 32) + 10, 0, 0, false, false};
  auto got = c.sampler_shard(o);
  auto want = shard_indices(spec_of(o, 4096, 4095));
  CHECK(first_difference(got, want) == "");
  REQUIRE(!got.empty());
  CHECK(got.front() == 4095);
  CHECK(got.back() < 4096);  // padding wrapped to the start
}

TEST_CASE("shard requests that cannot be served get clear errors", "[shards]") {
  TestDaemon d;
  World w(d, "errs", 2);

  auto expect = [&](const proto::Shard& m, ErrorCode code, const std::string& words) {
    auto e = test::raw_error_reply(d.endpoint(), proto::encode(9, m));
    INFO(e.message);
    CHECK(e.code == static_cast<uint16_t>(code));
    CHECK(e.message.find(words) != std::string::npos);
  };
  expect({"errs", 2, 100, 0, 0, true, false}, ErrorCode::kInvalidArgument,
         "rank 2 is outside job 'errs' of world size 2");
  expect({"nope", 0, 100, 0, 0, true, false}, ErrorCode::kUnknownJob, "no job 'nope'");
  // 2^30 unshuffled samples on 2 ranks: 2^29 indices per rank, far over a frame.
  expect({"errs", 0, uint64_t{1} << 30, 0, 0, false, false}, ErrorCode::kTooLarge,
         "more than one 65 MiB reply can carry");
  // Over 2^28 shuffled samples would need a permutation over 1 GiB.
  World wide(d, "errs-wide", 64);
  expect({"errs-wide", 0, (uint64_t{1} << 28) + 1, 0, 0, true, false}, ErrorCode::kTooLarge,
         "permutation");

  try {
    w.ranks[0]->sampler_shard({uint64_t{1} << 41, 0, 0, true, false});
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
  }
  Client unjoined(ClientOptions{d.endpoint()});
  CHECK_THROWS_AS(unjoined.sampler_shard({10}), Error);
  // The daemon still serves after all that.
  check_world(w, {100, 0, 0, true, false});
}

TEST_CASE("a resumed shard from the daemon is the rest of the epoch, shared as torch would",
          "[shards][resume]") {
  TestDaemon d;
  World w(d, "resumed", 3);
  for (bool drop_last : {false, true})
    for (uint64_t consumed : {0, 1, 500, 9998, 9999, 10000}) {
      Opts o{10000, 3, 17, true, drop_last, consumed};
      INFO("consumed " << consumed << " drop_last " << drop_last);
      auto got = w.fetch(o);
      for (uint32_t r = 0; r < w.size(); ++r)
        CHECK(first_difference(got[r], shard_indices(spec_of(o, w.size(), r))) == "");
    }
  Opts over{100, 0, 0, true, false, 101};
  CHECK_THROWS_AS(w.ranks[0]->sampler_shard(over), Error);
}

TEST_CASE("the C ABI hands out the same shard, malloc'd", "[shards]") {
  TestDaemon d;
  muster_client* c = muster_client_new(d.endpoint().c_str());
  REQUIRE(c);
  muster_rank_info info;
  REQUIRE(muster_join(c, "capi", 1, 0, 0, &info) == 0);
  int64_t* idx = nullptr;
  size_t count = 0;
  REQUIRE(muster_sampler_shard(c, 1234, 2, 7, 1, 0, &idx, &count) == 0);
  std::vector<int64_t> got(idx, idx + count);
  muster_free(idx);
  CHECK(first_difference(got, shard_indices(spec_of({1234, 2, 7, true, false}, 1, 0))) == "");
  idx = nullptr;
  REQUIRE(muster_sampler_shard(c, 0, 0, 0, 1, 0, &idx, &count) == 0);
  CHECK(count == 0);
  muster_free(idx);
  CHECK(muster_sampler_shard(c, 10, 0, 0, 1, 0, nullptr, &count) ==
        static_cast<int>(ErrorCode::kInvalidArgument));
  CHECK(std::string(muster_error_message(c)).find("indices") != std::string::npos);
  REQUIRE(muster_sampler_shard_from(c, 1234, 2, 7, 1, 0, 1000, &idx, &count) == 0);
  got.assign(idx, idx + count);
  muster_free(idx);
  CHECK(first_difference(got, shard_indices(spec_of({1234, 2, 7, true, false, 1000}, 1, 0))) == "");
  CHECK(count == 234);
  CHECK(muster_sampler_shard_from(c, 10, 0, 0, 1, 0, 11, &idx, &count) ==
        static_cast<int>(ErrorCode::kInvalidArgument));
  muster_client_free(c);
}

TEST_CASE("the daemon reproduces torch's DistributedSampler fixtures", "[shards]") {
  const std::string path = fixtures_dir() + "/sampler_fixtures.txt";
  std::ifstream in(path);
  REQUIRE(in);
  TestDaemon d;
  // One job per world size; a client per (world, rank) as the fixtures need.
  std::map<std::pair<uint32_t, uint32_t>, std::unique_ptr<Client>> clients;
  int checked = 0;
  std::string text;
  for (int line_no = 1; std::getline(in, text); ++line_no) {
    if (text.empty() || text[0] == '#') continue;
    std::istringstream line(text);
    Opts o;
    int shuffle = 0, drop = 0;
    uint32_t world = 0, rank = 0;
    std::string colon;
    line >> o.dataset_size >> o.epoch >> o.seed >> shuffle >> drop >> world >> rank >> colon;
    REQUIRE(colon == ":");
    o.shuffle = shuffle != 0;
    o.drop_last = drop != 0;
    std::vector<int64_t> want;
    for (int64_t x; line >> x;) want.push_back(x);
    auto& c = clients[{world, rank}];
    if (!c) {
      c = std::make_unique<Client>(ClientOptions{d.endpoint()});
      c->join({"fixtures-" + std::to_string(world), world, false, static_cast<int>(rank)});
    }
    INFO("fixture line " << line_no << ": " << text.substr(0, 60));
    CHECK(first_difference(c->sampler_shard(o), want) == "");
    ++checked;
  }
  CHECK(checked >= 100);
}

// The permutation is computed off the daemon's loop: a ping sent after a
// shard request whose permutation takes long (2^26 samples: ~1 s here) is
// answered first. Both go on one connection, whose replies keep the order
// the daemon sent them in, so a daemon that computed on its loop (answering
// the shard, then the ping) fails this whatever the timing.
TEST_CASE("a ping is answered while a big permutation is computed, the shard after it",
          "[shards]") {
  TestDaemon d;
  World w(d, "big", 2);
  const uint64_t n = uint64_t{1} << 26;
  Opts o{n, 1, 99, true, false, n - 1001};  // the whole permutation; a small reply
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 120000);
  s.connect(d.endpoint());
  s.send(zmq::buffer(
      proto::encode(1, proto::Shard{"big", 1, n, o.epoch, o.seed, true, false, o.consumed})));
  s.send(zmq::buffer(proto::encode(2, proto::Ping{})));
  std::vector<proto::Envelope> got;
  std::vector<zmq::message_t> frames(2);
  for (auto& f : frames) {
    REQUIRE(s.recv(f));
    got.push_back(proto::decode_envelope(f.data(), f.size()));
  }
  CHECK(got[0].request_id == 2);
  CHECK(got[0].type == static_cast<uint16_t>(proto::MsgType::kPong));
  REQUIRE(got[1].request_id == 1);
  REQUIRE(got[1].type == static_cast<uint16_t>(proto::MsgType::kShardReply));
  auto reply = proto::ShardReply::unpack(got[1].payload);
  REQUIRE(reply.width == 4);
  std::vector<int64_t> indices(reply.count);
  for (uint64_t k = 0; k < reply.count; ++k) {
    uint32_t v;
    std::memcpy(&v, reply.indices.data() + k * 4, 4);
    indices[k] = v;
  }
  const auto perm = torch_randperm(n, o.seed + o.epoch);  // once for both ranks
  CHECK(first_difference(indices, shard_from_permutation(perm, spec_of(o, 2, 1))) == "");
  // Cached now: the other rank's shard comes from the same permutation.
  CHECK(first_difference(w.ranks[0]->sampler_shard(o),
                         shard_from_permutation(perm, spec_of(o, 2, 0))) == "");
}

// Stopping while a permutation is computed: the worker is stopped and
// joined and the daemon exits cleanly (0; under ASan, LeakSanitizer finds
// nothing the worker allocated left). The parked request is failed with
// shutting_down; the reply may be lost with the socket as the daemon exits
// (no linger), but a reply that comes is that one.
TEST_CASE("a daemon stopped while it computes a permutation exits cleanly", "[shards]") {
  TestDaemon d;
  World w(d, "stopping", 1);
  const uint64_t n = uint64_t{1} << 27;
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 120000);
  s.connect(d.endpoint());
  s.send(zmq::buffer(proto::encode(1, proto::Shard{"stopping", 0, n, 0, 1, true, false, n - 1})));
  s.send(zmq::buffer(proto::encode(2, proto::Ping{})));
  zmq::message_t f;
  REQUIRE(s.recv(f));
  auto env = proto::decode_envelope(f.data(), f.size());
  REQUIRE(env.request_id == 2);  // the shard request is parked by now
  CHECK(d.stop(std::chrono::seconds(60)) == 0);
  s.set(zmq::sockopt::rcvtimeo, 1000);
  if (s.recv(f)) {
    env = proto::decode_envelope(f.data(), f.size());
    CHECK(env.request_id == 1);
    REQUIRE(env.type == static_cast<uint16_t>(proto::MsgType::kErrorReply));
    CHECK(proto::ErrorReply::unpack(env.payload).code ==
          static_cast<uint16_t>(ErrorCode::kShuttingDown));
  }
}
