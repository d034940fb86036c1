// GPU libraries found at run time, never linked: libmuster calls the NCCL a
// process already loaded (torch's) instead of a second copy, says so when
// there is none instead of handing out random bytes as an id, honours
// NCCL_COMM_ID; musterd's CUDA fallback (no NVML) numbers GPUs in PCI bus
// order with their UUIDs; --version says what was found. The binaries'
// NEEDED entries are checked by tests/check_gpu_links.py.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <thread>

#include "muster/broadcast.hpp"
#include "muster/client.hpp"
#include "muster/error.hpp"
#include "muster_config.h"
#include "support/process.hpp"

using namespace std::chrono_literals;
namespace test = muster::test;
using muster::Error;
using muster::ErrorCode;

namespace {

// The probe's one line: "id: ..." or "error: ...".
std::string probe(const test::TestDaemon& d, const std::string& preload,
                  std::map<std::string, std::string> env = {}) {
  env["MUSTER_ENDPOINT"] = d.endpoint();
  test::Process p({test::program("MUSTER_TEST_NCCL_PROBE"), preload}, env);
  auto out = p.read_all(30s);
  REQUIRE(p.wait(10s).has_value());
  return out;
}

std::string run(const std::vector<std::string>& argv, std::map<std::string, std::string> env) {
  test::Process p(argv, env, true);
  auto out = p.read_all(30s);
  REQUIRE(p.wait(10s) == 0);
  return out;
}

}  // namespace

TEST_CASE("libmuster uses the NCCL the process already loaded (as torch does), not a second copy") {
  test::TestDaemon d;
  // Loaded RTLD_LOCAL, as a dependency of torch's libraries is: invisible
  // to a global dlsym, found by its soname.
  auto out = probe(d, test::program("MUSTER_TEST_FAKE_NCCL"));
  CHECK_THAT(out, Catch::StartsWith("id: muster-fake-nccl-id"));
}

TEST_CASE("MUSTER_NCCL_LIBRARY names the NCCL to load") {
  test::TestDaemon d;
  auto out = probe(d, "", {{"MUSTER_NCCL_LIBRARY", test::program("MUSTER_TEST_FAKE_NCCL")}});
  CHECK_THAT(out, Catch::StartsWith("id: muster-fake-nccl-id"));
}

TEST_CASE("without NCCL there is no id, but an error that says NCCL was not found") {
  // Random bytes in place of an id would hang whoever hands them to NCCL.
  test::TestDaemon d;
  auto out = probe(d, "", {{"MUSTER_NCCL_LIBRARY", "/nonexistent/libnccl.so.2"}});
  CHECK_THAT(out, Catch::StartsWith("error: NCCL was not found"));
  CHECK_THAT(out, Catch::Contains("MUSTER_NCCL_LIBRARY=/nonexistent/libnccl.so.2"));
}

TEST_CASE(
    "with NCCL_COMM_ID set, several ids are refused with a sentence: NCCL has one root then") {
  test::TestDaemon d;
  ::setenv("NCCL_COMM_ID", "127.0.0.1:29555", 1);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      muster::Client c({d.endpoint()});
      c.join({"comm-id", 2, false, r});
      try {
        muster::nccl_unique_ids(c, 2, "world", 5s);
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kInvalidArgument) errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  ::unsetenv("NCCL_COMM_ID");
  for (const auto& e : errors) {
    CHECK_THAT(e, Catch::Contains("NCCL_COMM_ID=127.0.0.1:29555"));
    CHECK_THAT(e, Catch::Contains("ask for 1 id"));
  }
}

TEST_CASE("muster --version and musterd --version say which GPU libraries they find") {
  auto cli = run({test::program("MUSTER_TEST_MUSTER"), "--version"},
                 {{"MUSTER_NCCL_LIBRARY", test::program("MUSTER_TEST_FAKE_NCCL")}});
  CHECK_THAT(cli, Catch::Contains("NCCL: found (MUSTER_NCCL_LIBRARY="));
  CHECK_THAT(cli, Catch::Contains("version 2.99.1"));
  auto none = run({test::program("MUSTER_TEST_MUSTER"), "--version"},
                  {{"MUSTER_NCCL_LIBRARY", "/nonexistent/libnccl.so.2"}});
  CHECK_THAT(none, Catch::Contains("NCCL: NCCL was not found"));
  auto daemon = run({test::program("MUSTER_TEST_MUSTERD"), "--version"},
                    {{"MUSTER_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
                     {"MUSTER_CUDA_LIBRARY", test::program("MUSTER_TEST_FAKE_CUDA")}});
  CHECK_THAT(daemon,
             Catch::Contains("NVML: not found (cannot load /nonexistent/libnvidia-ml.so.1"));
#if HAVE_CUDA
  CHECK_THAT(daemon, Catch::Contains("CUDA driver: found, driver API 13.0"));
#else
  CHECK_THAT(daemon, Catch::Contains("CUDA driver: disabled in this build"));
#endif
}

#if HAVE_CUDA
TEST_CASE(
    "without NVML, the CUDA driver's GPUs are numbered in PCI bus order, with UUID and bus id") {
  // The driver numbers them fastest-first (here bus 81, 01, 41); muster's
  // indices are NVML's (PCI order), which its workers' CUDA_DEVICE_ORDER
  // matches.
  test::TestDaemon d({}, {{"MUSTER_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
                          {"MUSTER_CUDA_LIBRARY", test::program("MUSTER_TEST_FAKE_CUDA")}});
  muster::Client c({d.endpoint()});
  auto s = c.status();
  REQUIRE(s.devices.size() == 3);
  const char* bus[] = {"00000000:01:00.0", "00000000:41:00.0", "00000000:81:00.0"};
  const char* uuid[] = {"GPU-00000000-0000-0000-0000-000000000001",
                        "GPU-00000000-0000-0000-0000-000000000041",
                        "GPU-00000000-0000-0000-0000-000000000081"};
  for (size_t i = 0; i < 3; ++i) {
    CHECK(s.devices[i].index == i);
    CHECK(s.devices[i].pci_bus_id == bus[i]);
    CHECK(s.devices[i].uuid == uuid[i]);
  }
}
#endif
