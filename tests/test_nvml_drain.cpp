// Root drains a GPU (muster gpu drain N --reason ...): its holder keeps it
// until its rank ends, nobody is given it after, status says why, only root
// (or musterd's own uid) may do it, and the drain survives daemon restarts
// — as a critical XID's quarantine does. On the 8-GPU node of the NVML
// double (tests/nvml_double/).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>

#include "muster/client.hpp"
#include "muster/error.hpp"
#include "protocol/envelope.hpp"
#include "support/as_user.hpp"
#include "support/error_code.hpp"
#include "support/muster_cli.hpp"
#include "support/nvml_node.hpp"
#include "support/process.hpp"

using muster::Client;
using muster::ErrorCode;
using namespace std::chrono_literals;
namespace test = muster::test;

namespace {

// What the daemon says of GPU i: "health|reason|drain|holder".
std::string gpu_line(const test::TestDaemon& d, size_t i) {
  auto s = Client({d.endpoint()}).status();
  REQUIRE(s.devices.size() > i);
  const auto& g = s.devices[i];
  return g.health + "|" + g.reason + "|" + g.drain + "|" + g.job;
}

// `muster ARGS...` against the daemon: exit code and what it printed.
std::pair<int, std::string> cli(const test::TestDaemon& d, std::vector<std::string> args) {
  std::string sub = args.front();
  args.erase(args.begin());
  test::Process p(test::muster_cmd(sub, args), {{"MUSTER_ENDPOINT", d.endpoint()}}, true);
  std::string out = p.read_all(20s);
  auto rc = p.wait(20s);
  return {rc.value_or(-1), out};
}

}  // namespace

TEST_CASE("a drained GPU stays with its holder until it ends and goes to nobody after") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  Client holder({d.endpoint()});
  REQUIRE(holder.join({"train", 1, true, 0}).device == 0);

  auto [rc, out] = cli(d, {"gpu", "drain", "0", "--reason", "fan failing, RMA 4711"});
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out == "GPU 0 drained: fan failing, RMA 4711\n");
  // The holder keeps it and goes on working; status shows the drain.
  CHECK(gpu_line(d, 0) == "drained|drained: fan failing, RMA 4711|fan failing, RMA 4711|train");
  holder.set("k", "v");
  CHECK(holder.get("k", 5s) == "v");
  auto [jrc, json] = cli(d, {"status", "--json"});
  CHECK(jrc == 0);
  CHECK_THAT(json, Catch::Contains("\"drain\":\"fan failing, RMA 4711\""));
  auto [trc, table] = cli(d, {"status"});
  CHECK(trc == 0);
  CHECK_THAT(table, Catch::Contains("drained: fan failing, RMA 4711"));

  // Once the holder is gone, GPU 0 is free but nobody is given it: the next
  // jobs get GPUs 1 and 2.
  holder.leave();
  Client a({d.endpoint()}), b({d.endpoint()});
  CHECK(a.join({"next", 1, true, 0}).device == 1);
  CHECK(b.join({"after", 1, true, 0}).device == 2);
  CHECK(gpu_line(d, 0) == "drained|drained: fan failing, RMA 4711|fan failing, RMA 4711|");

  // A job that asks for GPU 0 by name is told why it cannot have it.
  auto [rrc, refused] = cli(d, {"run", "--nproc-per-node", "1", "--devices", "0", "--", "true"});
  CHECK(rrc != 0);
  CHECK_THAT(refused, Catch::Contains("GPU 0, which is drained: fan failing, RMA 4711"));

  // Undrained, it is leased again.
  auto [urc, uout] = cli(d, {"gpu", "undrain", "0"});
  CHECK(urc == 0);
  CHECK(uout == "GPU 0 undrained\n");
  CHECK(gpu_line(d, 0) == "ok|||");
  Client c({d.endpoint()});
  CHECK(c.join({"third", 1, true, 0}).device == 0);
}

TEST_CASE("a drain needs a reason and a GPU this daemon hands out") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  auto [rc, out] = cli(d, {"gpu", "drain", "1"});
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("a drain needs --reason TEXT"));
  // A drain without a reason is refused.
  CHECK(test::code_of([&] { Client({d.endpoint()}).drain_gpu(1, ""); }) ==
        ErrorCode::kInvalidArgument);
  auto [brc, bad] = cli(d, {"gpu", "drain", "8", "--reason", "x"});
  CHECK(brc == 1);
  CHECK_THAT(bad, Catch::Contains("GPU 8 is not among the GPUs this daemon hands out"));
  CHECK(gpu_line(d, 1) == "ok|||");
}

TEST_CASE("muster gpu parses as the other commands: did you mean, unique prefixes, usage errors") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  // A misspelt verb or flag: exit 2, the closest one suggested, nothing sent.
  auto [vrc, verb] = cli(d, {"gpu", "drian", "0", "--reason", "x"});
  CHECK(vrc == 2);
  CHECK_THAT(verb, Catch::Contains("muster gpu: unknown command 'drian'; did you mean 'drain'?"));
  CHECK_THAT(verb, Catch::Contains("Try 'muster gpu --help'."));
  auto [frc, flag] = cli(d, {"gpu", "drain", "0", "--reasn", "x"});
  CHECK(frc == 2);
  CHECK_THAT(flag, Catch::Contains("muster gpu: unrecognized option '--reasn'; did you mean "
                                   "'--reason'?"));
  CHECK_THAT(flag, Catch::Contains("Try 'muster gpu --help'."));
  // An undrain takes no reason.
  auto [urc, undrain] = cli(d, {"gpu", "undrain", "0", "--reason", "x"});
  CHECK(urc == 2);
  CHECK_THAT(undrain, Catch::Contains("muster gpu: --reason goes with drain only"));
  CHECK(gpu_line(d, 0) == "ok|||");
  // A unique prefix of a flag is the flag, and flags may come first.
  auto [prc, prefix] = cli(d, {"gpu", "drain", "0", "--rea", "by prefix"});
  CHECK(prc == 0);
  CHECK(prefix == "GPU 0 drained: by prefix\n");
  CHECK(gpu_line(d, 0) == "drained|drained: by prefix|by prefix|");
  auto [erc, first] = cli(d, {"gpu", "--reason=flag first", "drain", "2"});
  CHECK(erc == 0);
  CHECK(gpu_line(d, 2) == "drained|drained: flag first|flag first|");
  // --help lists the options from the table.
  auto [hrc, help] = cli(d, {"gpu", "--help"});
  CHECK(hrc == 0);
  CHECK_THAT(help, Catch::Contains("Usage: muster gpu drain N --reason TEXT"));
  CHECK_THAT(help, Catch::Contains("Options:\n  -h, --help"));
  CHECK_THAT(help, Catch::Contains("--reason TEXT"));
}

TEST_CASE("another uid may neither drain nor undrain a GPU, and nothing changes", "[access]") {
  if (!test::root()) {
    WARN("SKIP: needs root to run a second user (nobody)");
    return;
  }
  test::NvmlNode node(test::eight_gpu_node());
  test::OpenDaemon d({}, node.env());
  Client({d.endpoint()}).drain_gpu(3, "root's drain");
  const std::string ep = d.endpoint();
  const std::string muster = test::program("MUSTER_TEST_MUSTER");
  test::AsNobody nobody([&](test::Lines& io) {
    using namespace muster::proto;
    io.say(test::ask(ep, encode(1, GpuDrain{2, true, "not yours"})));
    io.say(test::ask(ep, encode(2, GpuDrain{3, false, ""})));
    // The command line says the same sentence.
    std::string cmd = "MUSTER_ENDPOINT=" + ep + " " + muster + " gpu undrain 3 2>&1";
    FILE* f = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[512];
    while (f && std::fgets(buf, sizeof buf, f)) out += buf;
    int rc = f ? ::pclose(f) : -1;
    if (!out.empty() && out.back() == '\n') out.pop_back();
    io.say("rc=" + std::to_string(WEXITSTATUS(rc)) + " " + out);
  });
  for (const char* what : {"drain", "undrain"}) {
    auto line = nobody.hear();
    INFO(what << ": " << line);
    CHECK(test::starts_with(line, "error=permission_denied only root"));
    CHECK_THAT(line, Catch::Contains("may send 'gpu_drain'; uid 65534 may not, and nothing was "
                                     "changed"));
  }
  auto line = nobody.hear();
  INFO(line);
  CHECK(test::starts_with(line, "rc=1 muster gpu undrain: only root"));
  CHECK(gpu_line(d, 2) == "ok|||");
  CHECK(gpu_line(d, 3) == "drained|drained: root's drain|root's drain|");
}

TEST_CASE("a drained GPU and a failed one stay so across daemon restarts") {
  test::NvmlNode node(test::eight_gpu_node());
  test::TestDaemon d({}, node.env());
  Client holder({d.endpoint()});
  REQUIRE(holder.join({"train", 2, true, 0}).device == 0);
  Client r1({d.endpoint()});
  REQUIRE(r1.join({"train", 2, true, 1}).device == 1);
  Client({d.endpoint()}).drain_gpu(0, "ECC trend, replace at next window");
  Client({d.endpoint()}).drain_gpu(4, "reserved for burn-in");
  // GPU 1 fails under its rank: a critical XID, not a drain.
  node.append("xid gpu=" + test::node_uuid(1) + " code=79");
  REQUIRE(test::eventually([&] { return gpu_line(d, 1).rfind("quarantined|", 0) == 0; }, 20s));

  // Twice: the first restart reads the drains from the change log, the
  // second from the snapshot the first one wrote. (The double delivers no
  // XID the scenario held before the daemon started: only the saved state
  // can know of GPU 1's.)
  for (int restart = 1; restart <= 2; ++restart) {
    INFO("restart " << restart);
    d.kill9();
    d.start();
    // The holder of GPU 0 still holds it; the drains and the failure stand.
    CHECK(gpu_line(d, 0) ==
          "drained|drained: ECC trend, replace at next window|ECC trend, replace at next "
          "window|train");
    CHECK(gpu_line(d, 1) == "quarantined|critical XID 79||train");
    CHECK(gpu_line(d, 4) == "drained|drained: reserved for burn-in|reserved for burn-in|");
  }
  // Nobody is given 0, 1 or 4 once free: a job of 5 fits only on 2, 3, 5, 6, 7.
  holder.leave();
  r1.leave();
  std::vector<int64_t> got;
  std::vector<std::unique_ptr<Client>> ranks;
  for (int i = 0; i < 5; ++i) {
    ranks.push_back(std::make_unique<Client>(muster::ClientOptions{d.endpoint()}));
    got.push_back(ranks.back()->join({"wide", 5, true, i}).device);
  }
  CHECK(got == std::vector<int64_t>{2, 3, 5, 6, 7});
  // Undrain after the reset: GPU 1 is healthy again for the daemon.
  Client({d.endpoint()}).undrain_gpu(1);
  CHECK(gpu_line(d, 1) == "ok|||");
}
