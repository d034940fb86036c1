// The metrics without a daemon: Prometheus's text format (escaping, number
// spelling, cumulative histogram buckets ending at +Inf), the exposition
// render() makes of a sample, /healthz's verdict, --metrics-listen's
// address, dcgm-exporter's job mapping files, and the journal fields of a
// log line. Runs in every build (libmicrohttpd or not).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include "muster_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "log.hpp"
#include "metrics/address.hpp"
#include "metrics/http.hpp"
#include "metrics/job_mapping.hpp"
#include "metrics/sample.hpp"
#include "metrics/text.hpp"
#include "muster/error.hpp"
#include "muster_config.h"
#include "support/process.hpp"
#include "systemd/journal.hpp"

using namespace muster::daemon::metrics;
using muster::test::Process;
using muster::test::TempDir;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> v;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

}  // namespace

TEST_CASE("label values escape backslash, double quote and newline, nothing else") {
  CHECK(escape_label_value("plain-job_1") == "plain-job_1");
  CHECK(escape_label_value("a\\b") == "a\\\\b");
  CHECK(escape_label_value("say \"hi\"") == "say \\\"hi\\\"");
  CHECK(escape_label_value("two\nlines") == "two\\nlines");
  CHECK(escape_label_value("tab\there") == "tab\there");
  CHECK(escape_help("back\\slash \"quoted\"\nnext") == "back\\\\slash \"quoted\"\\nnext");

  TextWriter w;
  w.sample("muster_x", {{"job", "we\"ird\\\njob"}, {"gpu", "0"}}, 1);
  // The value is muster::escape()d first (a dashboard shows no control
  // character of a user's), then escaped as the exposition format wants.
  CHECK(w.text() == "muster_x{job=\"we\\\"ird\\\\\\\\\\\\njob\",gpu=\"0\"} 1\n");
}

TEST_CASE("numbers are written as Prometheus reads them") {
  CHECK(format_value(0) == "0");
  CHECK(format_value(42) == "42");
  CHECK(format_value(-3) == "-3");
  CHECK(format_value(1e15) == "1000000000000000");
  CHECK(format_value(0.005) == "0.005");
  CHECK(format_value(2.5) == "2.5");
  CHECK(format_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(format_value(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(format_value(std::nan("")) == "NaN");
}

TEST_CASE("a histogram's buckets are cumulative and end at +Inf, then _sum and _count") {
  constexpr double bounds[] = {0.25, 1, 10};
  Histogram h;
  for (double v : {0.125, 0.25, 0.5, 3.0, 3.0, 99.0}) h.observe(bounds, v);
  TextWriter w;
  w.family("muster_t_seconds", TextWriter::Type::kHistogram, "test");
  Label l{"type", "join"};
  w.histogram("muster_t_seconds", {&l, 1}, bounds, h);
  auto v = lines(w.text());
  REQUIRE(v.size() == 8);
  CHECK(v[0] == "# HELP muster_t_seconds test");
  CHECK(v[1] == "# TYPE muster_t_seconds histogram");
  // 0.25 is in the first bucket: le means "less than or equal".
  CHECK(v[2] == "muster_t_seconds_bucket{type=\"join\",le=\"0.25\"} 2");
  CHECK(v[3] == "muster_t_seconds_bucket{type=\"join\",le=\"1\"} 3");
  CHECK(v[4] == "muster_t_seconds_bucket{type=\"join\",le=\"10\"} 5");
  CHECK(v[5] == "muster_t_seconds_bucket{type=\"join\",le=\"+Inf\"} 6");
  CHECK(v[6] == "muster_t_seconds_sum{type=\"join\"} 105.875");
  CHECK(v[7] == "muster_t_seconds_count{type=\"join\"} 6");
}

TEST_CASE("the exposition has HELP and TYPE once per family, before its samples") {
  Sample s;
  s.gpus.push_back({0, "GPU-aaaa", "train", "1000", false, false});
  s.gpus.push_back({1, "GPU-bbbb", "", "", true, false});
  JobSample j;
  j.id = "train";
  j.owner = "1000";
  j.generation = 2;
  j.world_size = 4;
  j.ranks = {0, 1, 0, 3, 0};
  j.parked_waits = 3;
  j.store_bytes = 100;
  s.jobs.push_back(j);
  s.peers.push_back({"10.0.0.1:29400", "coordinator", 1.5, false});
  RequestStats r;
  r.request(2, std::chrono::microseconds(30));  // join
  r.request(2, std::chrono::milliseconds(2));
  r.error(6);  // not_found
  SaveStats saves;
  saves.latency.observe(SaveStats::kLatencyBounds, 0.002);
  std::string text = render(s, r, saves);

  std::set<std::string> typed, helped;
  std::string family;
  std::regex sample_re(R"(^([a-z_]+)(\{[^}]*\})? (\S+)$)");
  for (const auto& l : lines(text)) {
    std::smatch m;
    if (l.rfind("# HELP ", 0) == 0) {
      family = l.substr(7, l.find(' ', 7) - 7);
      CHECK(helped.insert(family).second);
    } else if (l.rfind("# TYPE ", 0) == 0) {
      CHECK(l.substr(7, l.find(' ', 7) - 7) == family);
      CHECK(typed.insert(family).second);
    } else {
      INFO(l);
      REQUIRE(std::regex_match(l, m, sample_re));
      std::string name = m[1];
      // muster's own families, and the process_* every Prometheus client
      // library exports.
      CHECK((name.rfind("muster_", 0) == 0 || name.rfind("process_", 0) == 0));
      // A sample belongs to the family declared last (histograms add
      // suffixes).
      CHECK(name.rfind(family, 0) == 0);
    }
  }
  CHECK(typed == helped);
  CHECK(typed.count("muster_gpu_leased"));
  // What dashboards made for any exporter look for.
  for (const char* f : {"muster_build_info", "process_cpu_seconds_total",
                        "process_resident_memory_bytes", "process_virtual_memory_bytes",
                        "process_open_fds", "process_max_fds", "process_start_time_seconds"}) {
    INFO(f);
    CHECK(typed.count(f));
  }
  CHECK_THAT(text, Catch::Contains("muster_build_info{version=\"" MUSTER_VERSION "\""));
  CHECK_THAT(
      text,
      Catch::Contains(
          "muster_gpu_leased{gpu=\"0\",uuid=\"GPU-aaaa\",job_id=\"train\",owner=\"1000\"} 1\n"));
  CHECK_THAT(
      text,
      Catch::Contains("muster_gpu_leased{gpu=\"1\",uuid=\"GPU-bbbb\",job_id=\"\",owner=\"\"} 0\n"));
  CHECK_THAT(text, Catch::Contains("muster_gpu_quarantined{gpu=\"1\",uuid=\"GPU-bbbb\"} 1\n"));
  CHECK_THAT(text, Catch::Contains(
                       "muster_job_ranks{job_id=\"train\",owner=\"1000\",state=\"joined\"} 3\n"));
  CHECK_THAT(text, Catch::Contains("muster_job_generation{job_id=\"train\",owner=\"1000\"} 2\n"));
  CHECK_THAT(text, Catch::Contains("muster_parked_waits{job_id=\"train\",owner=\"1000\"} 3\n"));
  CHECK_THAT(text, Catch::Contains("muster_stuck_waits{job_id=\"train\",owner=\"1000\"} 0\n"));
  CHECK_THAT(text, Catch::Contains("muster_requests_total{type=\"join\"} 2\n"));
  CHECK_THAT(text, Catch::Contains("muster_requests_total{type=\"ping\"} 0\n"));
  CHECK_THAT(text, Catch::Contains("muster_error_replies_total{code=\"not_found\"} 1\n"));
  CHECK_THAT(text, Catch::Contains(
                       "muster_request_duration_seconds_bucket{type=\"join\",le=\"5e-05\"} 1\n"));
  CHECK_THAT(text, Catch::Contains(
                       "muster_request_duration_seconds_bucket{type=\"join\",le=\"+Inf\"} 2\n"));
  // Types never asked have no histogram.
  CHECK_THAT(text, !Catch::Contains("muster_request_duration_seconds_count{type=\"ping\"}"));
  CHECK_THAT(text, Catch::Contains("muster_state_save_duration_seconds_count 1\n"));
  CHECK_THAT(text, Catch::Contains("muster_peer_heartbeat_age_seconds{peer=\"10.0.0.1:29400\",role="
                                   "\"coordinator\"} 1.5\n"));
  CHECK_THAT(text, Catch::Contains("muster_peer_links{role=\"coordinator\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("muster_peer_links{role=\"node\"} 0\n"));
}

TEST_CASE("/healthz is healthy only with a fresh snapshot and a state that can be saved") {
  auto now = std::chrono::steady_clock::now();
  CHECK_THAT(Exporter::health(nullptr, now), Catch::Contains("no metrics yet"));
  Published p;
  p.at = now - std::chrono::seconds(1);
  CHECK(Exporter::health(&p, now).empty());
  p.at = now - Exporter::kStaleAfter - std::chrono::seconds(2);
  CHECK_THAT(Exporter::health(&p, now), Catch::Contains("has not turned for 7 s"));
  p.at = now;
  p.unhealthy = "No space left on device";
  CHECK_THAT(Exporter::health(&p, now),
             Catch::Contains("cannot save its state: No space left on device"));
}

TEST_CASE("--metrics-listen takes a numeric address and a port, muster's own by default") {
  auto a = parse_listen_address("127.0.0.1:9464");
  CHECK_FALSE(a.ipv6);
  CHECK(ntohs(reinterpret_cast<sockaddr_in*>(&a.addr)->sin_port) == 9464);
  auto b = parse_listen_address("[::1]:0");
  CHECK(b.ipv6);
  // No port: muster's own, not a Prometheus exporter's of the 9100-9999 range.
  auto c = parse_listen_address("127.0.0.1");
  CHECK(ntohs(reinterpret_cast<sockaddr_in*>(&c.addr)->sin_port) == 29401);
  auto d = parse_listen_address("[::1]");
  CHECK(d.ipv6);
  CHECK(ntohs(reinterpret_cast<sockaddr_in6*>(&d.addr)->sin6_port) == 29401);
  for (const char* bad : {"9464", "localhost:9464", "", ":9464", "127.0.0.1:", "127.0.0.1:http",
                          "127.0.0.1:70000", "::1:9464", "[::1:9464", "http://127.0.0.1:9464"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_listen_address(bad), Catch::Contains("--metrics-listen"));
  }
}

TEST_CASE("job mapping files hold the job id of a leased GPU and vanish when it is free") {
  TempDir tmp;
  std::string dir = tmp.path() + "/map";
  JobMapping m(dir);  // made when missing
  // A file left by an earlier daemon is put right by the first call.
  muster::test::spit(dir + "/1", "stale\n");
  m.set(0, "train");
  m.set(1, "");
  CHECK(muster::test::slurp_or_missing(dir + "/0") == "train\n");
  CHECK(muster::test::slurp_or_missing(dir + "/1") == "<missing>");
  struct stat st {};
  REQUIRE(::stat((dir + "/0").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);  // dcgm-exporter runs as another user
  m.set(0, "eval");
  CHECK(muster::test::slurp_or_missing(dir + "/0") == "eval\n");
  m.set(0, "");
  CHECK(muster::test::slurp_or_missing(dir + "/0") == "<missing>");
  CHECK(::access((dir + "/0.tmp").c_str(), F_OK) != 0);
}

TEST_CASE("links planted in the job mapping directory are replaced, never written through") {
  TempDir tmp;
  std::string dir = tmp.path() + "/map";
  JobMapping m(dir);
  // Another user who can write the directory points GPU 0's temporary
  // name and GPU 1's file at files of root's.
  std::string victim0 = tmp.path() + "/victim0", victim1 = tmp.path() + "/victim1";
  muster::test::spit(victim0, "precious\n");
  muster::test::spit(victim1, "precious\n");
  REQUIRE(::symlink(victim0.c_str(), (dir + "/0.tmp").c_str()) == 0);
  REQUIRE(::symlink(victim1.c_str(), (dir + "/1").c_str()) == 0);
  m.set(0, "train");
  m.set(1, "train");
  CHECK(muster::test::slurp_or_missing(victim0) == "precious\n");
  CHECK(muster::test::slurp_or_missing(victim1) == "precious\n");
  CHECK(muster::test::slurp_or_missing(dir + "/0") == "train\n");
  CHECK(muster::test::slurp_or_missing(dir + "/1") == "train\n");
  struct stat st {};
  REQUIRE(::lstat((dir + "/1").c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  // Freeing a GPU whose file is a link removes the link, not its target.
  REQUIRE(::unlink((dir + "/1").c_str()) == 0);
  REQUIRE(::symlink(victim1.c_str(), (dir + "/1").c_str()) == 0);
  m.set(1, "");
  CHECK(muster::test::slurp_or_missing(victim1) == "precious\n");
  CHECK(::lstat((dir + "/1").c_str(), &st) != 0);
}

TEST_CASE("a job mapping file that cannot be written is logged, not fatal") {
  TempDir tmp;
  std::string dir = tmp.path() + "/map";
  JobMapping m(dir);
  // A directory where the temporary file goes: the write fails, even for
  // root, and says so in the log.
  REQUIRE(::mkdir((dir + "/0.tmp").c_str(), 0700) == 0);
  CHECK_NOTHROW(m.set(0, "train"));
  CHECK(muster::test::slurp_or_missing(dir + "/0") == "<missing>");
  CHECK_NOTHROW(m.set(0, ""));
}

TEST_CASE("a job mapping directory that is not a directory is refused with a sentence") {
  TempDir tmp;
  std::string dir = tmp.path() + "/not-a-dir";
  muster::test::spit(dir, "x");
  try {
    JobMapping m(dir);
    FAIL("a file was taken for the job mapping directory");
  } catch (const muster::Error& e) {
    CHECK(e.code() == muster::ErrorCode::kPermissionDenied);
    CHECK(std::string(e.what()) == "refusing job mapping directory " + dir +
                                       ": it is not a directory; remove it or choose another "
                                       "with --job-mapping-dir");
  }
}

TEST_CASE("a log line's journal entry carries the fields its call site knows") {
  using muster::log::Level;
  auto f = muster::log::journal_fields(Level::kWarning, "job=run42 rank=3 pid=7 joined",
                                       muster::log::job("run42", 3, 1));
  std::vector<std::string> want = {"MESSAGE=job=run42 rank=3 pid=7 joined",
                                   "PRIORITY=4",
                                   "SYSLOG_IDENTIFIER=musterd",
                                   "JOB=run42",
                                   "RANK=3",
                                   "GPU=1"};
  CHECK(f == want);
  f = muster::log::journal_fields(Level::kInfo, "lost", muster::log::peer("10.0.0.2:29400"));
  CHECK(f == std::vector<std::string>{"MESSAGE=lost", "PRIORITY=6", "SYSLOG_IDENTIFIER=musterd",
                                      "PEER=10.0.0.2:29400"});
  // No field the site does not know: a CPU rank has no GPU.
  f = muster::log::journal_fields(Level::kInfo, "x", muster::log::job("j", 0, -1));
  CHECK(std::find(f.begin(), f.end(), "GPU=-1") == f.end());
  CHECK(f.back() == "RANK=0");
}

TEST_CASE("stderr is the journal only when JOURNAL_STREAM names it") {
  TempDir tmp;
  std::string file = tmp.path() + "/stream";
  muster::test::spit(file, "");
  int fd = ::open(file.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  std::string mine = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  std::string other = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1);
  using muster::daemon::systemd::stream_is_journal;
  CHECK(stream_is_journal(mine.c_str(), fd));
  CHECK_FALSE(stream_is_journal(other.c_str(), fd));
  CHECK_FALSE(stream_is_journal(nullptr, fd));
  CHECK_FALSE(stream_is_journal("garbage", fd));
  ::close(fd);
}

TEST_CASE("--metrics-listen works where the metrics were built, and says why not elsewhere") {
  Process p({muster::test::program("MUSTER_TEST_MUSTERD"), "--no-config", "--check-config",
             "--metrics-listen", "127.0.0.1:9464"},
            {}, true);
  std::string out = p.read_all(30s);
  auto code = p.wait(30s);
  REQUIRE(code.has_value());
  if (HAVE_METRICS) {
    CHECK(*code == 0);
  } else {
    CHECK(*code == 2);
    CHECK_THAT(out, Catch::Contains("built without metrics"));
  }
  // A bad address is refused in either build.
  Process bad({muster::test::program("MUSTER_TEST_MUSTERD"), "--no-config", "--check-config",
               "--metrics-listen", "localhost:9464"},
              {}, true);
  out = bad.read_all(30s);
  CHECK(bad.wait(30s) == std::optional<int>(2));
  CHECK_THAT(out, Catch::Contains("--metrics-listen"));
}
