// GPU placement (daemon/gpu/placement, through DeviceLeases::pick): the
// sets an expert would choose on the nodes issue #21 names. The end-to-end
// check through NVML's double and a daemon is test_nvml_placement.cpp.
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>

#include "core/devices.hpp"
#include "gpu/placement.hpp"
#include "muster/error.hpp"

using muster::daemon::DeviceLeases;
using muster::gpu::Device;
using muster::gpu::Path;

namespace {

// An 8-GPU, two-socket node: GPUs 0-3 on NUMA node 0, 4-7 on node 1; PCIe
// switches pair (0,1) (2,3) (4,5) (6,7), and so do NVLinks (4 each).
std::vector<Device> two_socket_pairs() {
  std::vector<Device> gpus(8);
  for (uint32_t i = 0; i < 8; ++i) {
    gpus[i].index = i;
    gpus[i].numa_node = i / 4;
    gpus[i].nvlinks.assign(8, 0);
    gpus[i].paths.assign(8, 0);
    for (uint32_t j = 0; j < 8; ++j) {
      Path p = i == j           ? Path::kSelf
               : i / 2 == j / 2 ? Path::kSwitch
               : i / 4 == j / 4 ? Path::kNumaNode
                                : Path::kSystem;
      gpus[i].paths[j] = static_cast<int32_t>(p);
      if (i != j && i / 2 == j / 2) gpus[i].nvlinks[j] = 4;
    }
  }
  return gpus;
}

// Eight GPUs on NVSwitches: 18 links between every pair, two sockets.
std::vector<Device> nvswitch() {
  auto gpus = two_socket_pairs();
  for (auto& g : gpus)
    for (uint32_t j = 0; j < 8; ++j) g.nvlinks[j] = j == g.index ? 0 : 18;
  return gpus;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

void lease_all(DeviceLeases& d, const std::string& job, const std::vector<int64_t>& got) {
  for (size_t r = 0; r < got.size(); ++r) d.lease(job, static_cast<uint32_t>(r), got[r]);
}

}  // namespace

TEST_CASE("two ranks get an NVLink pair, four ranks one socket's four") {
  DeviceLeases d(two_socket_pairs());
  CHECK(d.pick("a", 2, true, {}) == std::vector<int64_t>{0, 1});
  CHECK(d.pick("a", 4, true, {}) == std::vector<int64_t>{0, 1, 2, 3});
  // Once 0 and 1 are taken, a 4-rank job still stays on one socket (4-7),
  // not 2,3 with 4,5 — the first free GPUs.
  lease_all(d, "a", d.pick("a", 2, true, {}));
  CHECK(sorted(d.pick("b", 4, true, {})) == std::vector<int64_t>{4, 5, 6, 7});
  // A 2-rank job next to it takes the other pair, not half of two pairs.
  CHECK(d.pick("c", 2, true, {}) == std::vector<int64_t>{2, 3});
}

TEST_CASE("a job that cannot have a pair leaves the pairs for the next job") {
  DeviceLeases d(two_socket_pairs());
  // GPU 0 busy: a 1-rank job takes 1 (whose partner is gone), not 2.
  d.lease("x", 0, 0);
  CHECK(d.pick("a", 1, true, {}) == std::vector<int64_t>{1});
  // GPU 3 busy instead: the lone 2 goes, not 0 (the lowest), which would
  // break the pair (0,1) that a 2-rank job wants next.
  {
    DeviceLeases e(two_socket_pairs());
    e.lease("x", 0, 3);
    CHECK(e.pick("a", 1, true, {}) == std::vector<int64_t>{2});
  }
  // GPUs 0 and 2 busy: a 2-rank job gets a whole pair (4,5), not 1 and 3,
  // which share no NVLink.
  d.lease("x", 1, 2);
  CHECK(d.pick("b", 2, true, {}) == std::vector<int64_t>{4, 5});
  // Three GPUs wanted: a pair and a neighbour on one socket (4,5,6), not
  // the lone 1 and 3 of the first socket with a GPU of the second.
  CHECK(sorted(d.pick("c", 3, true, {})) == std::vector<int64_t>{4, 5, 6});
}

TEST_CASE("with GPU 2 foreign and GPU 5 failed, 2 ranks get (0,1) or (6,7), 6 ranks the rest") {
  DeviceLeases d(two_socket_pairs());
  d.quarantine(5, "uncorrectable ECC errors");
  auto foreign = [](uint32_t i) { return i == 2 ? std::string("pid 4242 of uid 1001") : ""; };
  auto two = d.pick("a", 2, true, {}, foreign);
  CHECK((two == std::vector<int64_t>{0, 1} || two == std::vector<int64_t>{6, 7}));
  CHECK(sorted(d.pick("a", 6, true, {}, foreign)) == std::vector<int64_t>{0, 1, 3, 4, 6, 7});
  CHECK_THROWS_AS(d.pick("a", 7, true, {}, foreign), muster::Error);
}

TEST_CASE("on NVSwitch every set is equal: the lowest free GPUs, in order") {
  DeviceLeases d(nvswitch());
  CHECK(d.pick("a", 3, true, {}) == std::vector<int64_t>{0, 1, 2});
  d.lease("x", 0, 1);
  // All pairs have 18 links; the socket still counts: 0,2,3 beat 0,2,4.
  CHECK(d.pick("a", 3, true, {}) == std::vector<int64_t>{0, 2, 3});
  CHECK(sorted(d.pick("a", 7, true, {})) == std::vector<int64_t>{0, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("a job that fits on one socket stays there, whatever a close pair elsewhere offers") {
  // GPUs 0-3 on NUMA node 0, each on its own root port (NODE between
  // them); 4 and 5 on node 1 behind one switch, NVLinked.
  std::vector<Device> gpus(6);
  for (uint32_t i = 0; i < 6; ++i) {
    gpus[i].index = i;
    gpus[i].numa_node = i < 4 ? 0 : 1;
    gpus[i].nvlinks.assign(6, 0);
    gpus[i].paths.assign(6, static_cast<int32_t>(Path::kSystem));
    for (uint32_t j = 0; j < 6; ++j)
      if (i == j)
        gpus[i].paths[j] = 0;
      else if (i / 4 == j / 4)
        gpus[i].paths[j] = static_cast<int32_t>(i < 4 ? Path::kNumaNode : Path::kSwitch);
  }
  gpus[4].nvlinks[5] = gpus[5].nvlinks[4] = 4;
  DeviceLeases d(gpus);
  // 0,4,5 has the pair and fewer summed hops (10+50+50 < 3*40), but its
  // ring crosses the sockets twice.
  CHECK(d.pick("a", 3, true, {}) == std::vector<int64_t>{0, 1, 2});
  // Two ranks: the NVLinked pair, on one socket too.
  CHECK(d.pick("a", 2, true, {}) == std::vector<int64_t>{4, 5});
}

TEST_CASE("ranks follow the ring the links give") {
  // A ring 0-2-1-3-0 of NVLinks, all on one switch otherwise.
  std::vector<Device> gpus(4);
  std::set<std::pair<int, int>> ring{{0, 2}, {2, 1}, {1, 3}, {3, 0}};
  for (uint32_t i = 0; i < 4; ++i) {
    gpus[i].index = i;
    gpus[i].nvlinks.assign(4, 0);
    gpus[i].paths.assign(4, static_cast<int32_t>(Path::kSwitch));
    for (uint32_t j = 0; j < 4; ++j)
      if (ring.count({i, j}) || ring.count({j, i})) gpus[i].nvlinks[j] = 2;
  }
  DeviceLeases d(gpus);
  CHECK(d.pick("a", 4, true, {}) == std::vector<int64_t>{0, 2, 1, 3});
}

TEST_CASE("--devices wins; placement only chooses within it") {
  DeviceLeases d(two_socket_pairs());
  CHECK(sorted(d.pick("a", 2, true, {1, 2})) == std::vector<int64_t>{1, 2});
  // Four allowed (a scheduler's CUDA_VISIBLE_DEVICES), two wanted: the
  // linked pair among them.
  CHECK(d.pick("a", 2, true, {1, 4, 5, 6}) == std::vector<int64_t>{4, 5});
}

TEST_CASE("a rank joining a running job is placed beside the job's GPUs") {
  DeviceLeases d(two_socket_pairs());
  d.lease("a", 0, 6);
  CHECK(d.pick("a", 1, true, {}) == std::vector<int64_t>{7});
  // Where nearness to the job and what stays free disagree, the job wins:
  // GPU 3 shares a switch with the job's GPU 0; taking 2 instead would keep
  // the switch mates 1 and 3 free together.
  std::vector<Device> four(4);
  for (uint32_t i = 0; i < 4; ++i) {
    four[i].index = i;
    four[i].paths.assign(4, static_cast<int32_t>(Path::kSystem));
    four[i].paths[i] = 0;
  }
  for (auto [a, b] : {std::pair{0, 3}, {1, 3}})
    four[a].paths[b] = four[b].paths[a] = static_cast<int32_t>(Path::kSwitch);
  DeviceLeases e(four);
  CHECK(e.pick("b", 1, true, {}) == std::vector<int64_t>{2});  // the loner
  e.lease("a", 0, 0);
  CHECK(e.pick("a", 1, true, {}) == std::vector<int64_t>{3});
  CHECK(e.pick("b", 1, true, {}) == std::vector<int64_t>{2});
}

TEST_CASE("without topology, the lowest free GPUs as before") {
  std::vector<Device> plain(5);
  for (uint32_t i = 0; i < 5; ++i) plain[i].index = 4 - i;  // as musterd --devices 4,3,2,1,0
  DeviceLeases d(plain);
  d.lease("x", 0, 1);
  CHECK(d.pick("a", 3, true, {}) == std::vector<int64_t>{0, 2, 3});
}

TEST_CASE("many GPUs: the greedy search still finds the NVLink islands") {
  // 32 GPUs in islands of four fully linked GPUs; 16 wanted: C(32,16) is
  // far too many sets to try, so this is the greedy path.
  std::vector<Device> gpus(32);
  for (uint32_t i = 0; i < 32; ++i) {
    gpus[i].index = i;
    gpus[i].numa_node = i / 16;
    gpus[i].nvlinks.assign(32, 0);
    gpus[i].paths.assign(32, static_cast<int32_t>(Path::kSystem));
    for (uint32_t j = 0; j < 32; ++j)
      if (i != j && i / 4 == j / 4) gpus[i].nvlinks[j] = 6;
  }
  DeviceLeases d(gpus);
  d.lease("x", 0, 0);  // island 0 broken
  auto got = sorted(d.pick("a", 16, true, {}));
  REQUIRE(got.size() == 16);
  // Four whole islands: every chosen GPU's island mates are all chosen.
  for (auto g : got)
    for (int64_t m = g / 4 * 4; m < g / 4 * 4 + 4; ++m)
      CHECK(std::count(got.begin(), got.end(), m) == 1);
}
