// Shard requests parked while their permutation is computed off the loop
// (daemon/core/shard_waits.hpp), driven through daemon::State with a
// Permuter that finishes only when the test says: one computation per
// permutation however many ranks ask, other requests answered meanwhile,
// and every parked request answered once — with its shard, or with an error
// when its job ends or the daemon stops — or forgotten with its client.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstring>

#include "core/state.hpp"
#include "protocol/messages.hpp"
#include "sampler/sampler.hpp"
#include "support/replies.hpp"

using namespace muster;
using namespace muster::daemon;
using namespace muster::proto;

namespace {

// Computes a permutation only in finish(), as if the worker thread took
// that long.
class HeldPermuter final : public Permuter {
 public:
  struct Task {
    uint64_t ticket, n, seed;
  };
  std::vector<Task> started;
  void start(uint64_t ticket, uint64_t n, uint64_t seed) override {
    started.push_back({ticket, n, seed});
    pending_.push_back(started.back());
  }
  std::vector<Done> take() override { return std::exchange(done_, {}); }
  // The computations started so far are done.
  void finish() {
    for (const auto& t : pending_) {
      Done d{t.ticket, std::make_unique<uint32_t[]>(t.n)};
      torch_randperm_u32(d.perm.get(), t.n, t.seed);
      done_.push_back(std::move(d));
    }
    pending_.clear();
  }

 private:
  std::vector<Task> pending_;
  std::vector<Done> done_;
};

struct Reply : test::ReplyHead {
  std::vector<int64_t> indices;
};

std::vector<Reply> replies(const std::vector<Outgoing>& out) {
  std::vector<Reply> r;
  for (const auto& o : out) {
    auto env = decode_envelope(o.frame.data(), o.frame.size());
    Reply x;
    static_cast<test::ReplyHead&>(x) = test::reply_head(o, env);
    if (env.type == static_cast<uint16_t>(MsgType::kShardReply)) {
      auto s = ShardReply::unpack(env.payload);
      REQUIRE(s.width == 4);
      for (uint64_t k = 0; k < s.count; ++k) {
        uint32_t v;
        std::memcpy(&v, s.indices.data() + k * 4, 4);
        x.indices.push_back(v);
      }
    }
    r.push_back(std::move(x));
  }
  return r;
}

constexpr uint64_t kN = 1000;

struct Daemon {
  PidWatch watch;
  State s{{}, watch};
  HeldPermuter* perm = nullptr;
  uint64_t next = 1;

  Daemon() {
    auto p = std::make_unique<HeldPermuter>();
    perm = p.get();
    s.samplers().set_permuter(std::move(p));
  }
  template <class M>
  std::vector<Reply> ask(const std::string& client, const M& m) {
    auto frame = encode(next++, m);
    auto env = decode_envelope(frame.data(), frame.size());
    ReplyTo to;
    to.routing_id = client;
    to.request_id = env.request_id;
    std::vector<Outgoing> out;
    s.handle(to, env, out);
    return replies(out);
  }
  void join(const std::string& job, uint32_t ranks) {
    for (uint32_t r = 0; r < ranks; ++r)
      REQUIRE(ask("launcher", Join{job, ranks, false, ::getpid(), r}).at(0).type ==
              static_cast<uint16_t>(MsgType::kRankInfo));
  }
  void leave(const std::string& job, uint32_t ranks) {
    for (uint32_t r = 0; r < ranks; ++r) ask("launcher", Leave{job, ::getpid(), r});
  }
  std::vector<Reply> shard(const std::string& client, const std::string& job, uint32_t rank,
                           uint64_t epoch = 0, uint64_t n = kN) {
    return ask(client, Shard{job, rank, n, epoch, 5, true, false, 0});
  }
  // Shard requests of these ranks of job (each from client "r<rank>") that
  // park: no reply yet.
  void parked(const std::string& job, std::initializer_list<uint32_t> ranks) {
    for (uint32_t r : ranks) CHECK(shard("r" + std::to_string(r), job, r).empty());
  }
  std::vector<Reply> done() {
    perm->finish();
    std::vector<Outgoing> out;
    s.samplers().permutations_done(out);
    return replies(out);
  }
};

std::vector<int64_t> want(uint32_t world, uint32_t rank, uint64_t epoch = 0) {
  ShardSpec spec;
  spec.dataset_size = kN;
  spec.epoch = epoch;
  spec.seed = 5;
  spec.num_replicas = world;
  spec.rank = rank;
  return shard_indices(spec);
}

}  // namespace

TEST_CASE("ranks asking for one permutation wait on one computation, others are served meanwhile",
          "[shards]") {
  Daemon d;
  d.join("j", 3);
  d.parked("j", {0, 2});
  REQUIRE(d.perm->started.size() == 1);
  CHECK(d.perm->started[0].n == kN);
  auto pong = d.ask("other", Ping{});
  REQUIRE(pong.size() == 1);
  CHECK(pong[0].type == static_cast<uint16_t>(MsgType::kPong));
  CHECK(d.shard("r1", "j", 1).empty());
  CHECK(d.perm->started.size() == 1);

  auto r = d.done();
  REQUIRE(r.size() == 3);
  for (const auto& x : r) {
    INFO(x.to);
    REQUIRE(x.type == static_cast<uint16_t>(MsgType::kShardReply));
    CHECK(x.indices == want(3, static_cast<uint32_t>(x.to[1] - '0')));
  }
  // Cached now: answered at once, nothing computed again.
  auto again = d.shard("r1", "j", 1);
  REQUIRE(again.size() == 1);
  CHECK(again[0].indices == want(3, 1));
  CHECK(d.perm->started.size() == 1);
}

TEST_CASE("one permutation is computed at a time; the next starts when it is done", "[shards]") {
  Daemon d;
  d.join("a", 1);
  d.join("b", 1);
  CHECK(d.shard("a0", "a", 0, 0).empty());
  CHECK(d.shard("b0", "b", 0, 1).empty());
  CHECK(d.perm->started.size() == 1);
  auto first = d.done();
  REQUIRE(first.size() == 1);
  CHECK(first[0].to == "a0");
  CHECK(first[0].indices == want(1, 0, 0));
  REQUIRE(d.perm->started.size() == 2);
  auto second = d.done();
  REQUIRE(second.size() == 1);
  CHECK(second[0].to == "b0");
  CHECK(second[0].indices == want(1, 0, 1));
}

TEST_CASE("a job that ends while its permutation is computed fails its parked requests once",
          "[shards]") {
  Daemon d;
  d.join("j", 2);
  CHECK(d.shard("r0", "j", 0).empty());
  d.leave("j", 1);
  auto gone = d.ask("launcher", Leave{"j", ::getpid(), 1});
  // The leave's ok, and the parked request's error.
  REQUIRE(gone.size() == 2);
  auto err = gone[0].type == static_cast<uint16_t>(MsgType::kErrorReply) ? gone[0] : gone[1];
  CHECK(err.to == "r0");
  CHECK(err.code == ErrorCode::kPeerExited);
  // The late result answers nobody and is not kept: the job of the same
  // name that comes next has its own computation.
  CHECK(d.done().empty());
  d.join("j", 2);
  CHECK(d.shard("r0", "j", 0).empty());
  REQUIRE(d.perm->started.size() == 2);
  auto r = d.done();
  REQUIRE(r.size() == 1);
  CHECK(r[0].indices == want(2, 0));
}

TEST_CASE("a stopping daemon fails parked shard requests; a forgotten client gets nothing",
          "[shards]") {
  Daemon d;
  d.join("j", 2);
  d.parked("j", {0, 1});
  SECTION("cancel_all") {
    std::vector<Outgoing> out;
    d.s.cancel_all(out);
    auto r = replies(out);
    REQUIRE(r.size() == 2);
    for (const auto& x : r) CHECK(x.code == ErrorCode::kShuttingDown);
    CHECK(d.done().empty());
  }
  SECTION("forget_client_waits") {
    auto ids = d.s.forget_client_waits("r1");
    CHECK(ids.size() == 1);
    auto r = d.done();
    REQUIRE(r.size() == 1);
    CHECK(r[0].to == "r0");
    CHECK(r[0].indices == want(2, 0));
  }
}

TEST_CASE("the permutation being computed counts against the cache's budget", "[shards]") {
  ShardCache cache;
  const uint64_t half = ShardCache::kBudgetBytes / 2 / sizeof(uint32_t);  // 512 MiB of entries
  // Never written: only the bookkeeping matters here.
  cache.insert("a", 0, half, 1, std::make_unique_for_overwrite<uint32_t[]>(half));
  REQUIRE(cache.find("a", 0, half, 1));
  cache.reserve(half / 2);  // fits beside it
  CHECK(cache.find("a", 0, half, 1));
  cache.release(half / 2);
  cache.reserve(half + 1);  // does not: the kept one goes
  CHECK_FALSE(cache.find("a", 0, half, 1));
  // A computation under way holds its room: what is kept meanwhile makes
  // way for it, not the other way round.
  cache.insert("b", 0, 1000, 1, std::make_unique<uint32_t[]>(1000));
  cache.insert("c", 0, half - 1000, 1, std::make_unique_for_overwrite<uint32_t[]>(half - 1000));
  CHECK_FALSE(cache.find("b", 0, 1000, 1));
  CHECK(cache.find("c", 0, half - 1000, 1));
  CHECK_THROWS_AS(ShardCache::check_fits(ShardCache::kBudgetBytes / sizeof(uint32_t) + 1), Error);
}
