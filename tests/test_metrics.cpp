// musterd --metrics-listen and --job-mapping-dir against a private daemon
// with simulated GPUs: /metrics shows the real state (ranks joined, GPUs
// leased, requests and error replies counted), /healthz is 200 while the
// state can be saved and 503 on a full state directory ([full-disk], needs
// root for its tmpfs), clients that never send or never read hold up
// neither other scrapes nor the daemon, dcgm-exporter's mapping files
// follow the leases, and the log's journal entries (MUSTER_LOG_SINK=file:)
// carry JOB=, RANK= and GPU=.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "latency_checks.hpp"
#include "muster/client.hpp"
#include "support/error_code.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::eventually;
using test::Process;
using test::TempDir;

namespace {
// The owner label of the test's own jobs: its uid.
std::string me() {
  return std::to_string(::getuid());
}
}  // namespace

namespace {

struct Reply {
  int status = 0;  // 0: no answer
  std::string body;
};

int connect_to(const std::string& hostport) {
  auto colon = hostport.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(hostport.substr(colon + 1))));
  ::inet_pton(AF_INET, hostport.substr(0, colon).c_str(), &a.sin_addr);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{10, 0};  // an upper bound, never a speed check
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A plain HTTP/1.0 GET over a socket.
Reply get(const std::string& hostport, const std::string& path) {
  Reply r;
  int fd = connect_to(hostport);
  if (fd < 0) return r;
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + hostport + "\r\n\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return r;
  }
  std::string all;
  char buf[65536];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) all.append(buf, n);
  ::close(fd);
  if (all.rfind("HTTP/1.", 0) != 0) return r;
  r.status = std::stoi(all.substr(9, 3));
  auto body = all.find("\r\n\r\n");
  if (body != std::string::npos) r.body = all.substr(body + 4);
  return r;
}

// The value of the sample whose name and labels are exactly `series`; NaN
// when there is none.
double value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l.size() > series.size() && l.compare(0, series.size(), series) == 0 &&
        l[series.size()] == ' ')
      return std::stod(l.substr(series.size() + 1));
  return std::nan("");
}

// A private musterd with two simulated GPUs, metrics on any free loopback
// port, the job mapping and the log's journal entries in its directory.
struct Node {
  TempDir dir;
  std::string state_dir;
  std::unique_ptr<Process> proc;
  std::string endpoint, metrics;
  explicit Node(std::string state = "", std::vector<std::string> extra = {})
      : state_dir(std::move(state)) {
    std::vector<std::string> argv = {test::program("MUSTER_TEST_MUSTERD"),
                                     "--runtime-dir",
                                     dir.path(),
                                     "--no-config",
                                     "--log-level",
                                     "info",
                                     "--simulate-gpus",
                                     "2",
                                     "--containment",
                                     "guardian",
                                     "--metrics-listen",
                                     "127.0.0.1:0",
                                     "--job-mapping-dir",
                                     mapping()};
    if (!state_dir.empty()) argv.insert(argv.end(), {"--state-dir", state_dir});
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc = std::make_unique<Process>(
        argv, std::map<std::string, std::string>{{"MUSTER_LOG_SINK", "file:" + journal()}});
    endpoint = "ipc://" + dir.path() + "/musterd.sock";
    bool up = eventually(
        [&] {
          std::ifstream(dir.path() + "/metrics-endpoint") >> metrics;
          if (metrics.empty()) return false;
          try {
            Client c({endpoint, 200ms});
            return c.status().pid == proc->pid();
          } catch (const Error&) {
            return false;
          }
        },
        30s);
    if (!up) throw std::runtime_error("private musterd did not come up in " + dir.path());
  }
  ~Node() {
    proc->signal(SIGTERM);
    proc->wait(20s);
  }
  std::string mapping() const { return dir.path() + "/job-mapping"; }
  std::string journal() const { return dir.path() + "/journal"; }
  std::string scrape() const {
    Reply r = get(metrics, "/metrics");
    REQUIRE(r.status == 200);
    return r.body;
  }
  // Waits (up to 10 s: the loop publishes every second) until series has
  // value want; returns the last value seen.
  double await(const std::string& series, double want) const {
    double v = std::nan("");
    eventually(
        [&] {
          v = value(scrape(), series);
          return v == want;
        },
        10s);
    return v;
  }
};

// A rank that joins job `job` (local rank `r` of `lws`, with a GPU) and
// holds its lease until killed.
std::unique_ptr<Process> rank(const Node& n, const std::string& job, int lws, int r) {
  auto p = std::make_unique<Process>(
      std::vector<std::string>{test::program("MUSTER_TEST_RANK"), job, std::to_string(lws),
                               std::to_string(r), "gpu"},
      std::map<std::string, std::string>{{"MUSTER_ENDPOINT", n.endpoint}});
  auto line = p->read_line(20s).value_or("");
  REQUIRE_THAT(line, Catch::StartsWith("rank="));
  return p;
}

}  // namespace

TEST_CASE("metrics show the ranks, leases, requests and errors of a running job") {
  Node n;
  // Before any job: both GPUs free, no file in the mapping directory.
  std::string t = n.scrape();
  CHECK(value(t, "muster_jobs") == 0);
  CHECK(test::slurp_or_missing(n.mapping() + "/0") == "<missing>");
  double joins = value(t, "muster_requests_total{type=\"join\"}");
  REQUIRE(joins == 0);

  auto r0 = rank(n, "train", 2, 0);
  auto r1 = rank(n, "train", 2, 1);
  CHECK(n.await("muster_job_ranks{job_id=\"train\",owner=\"" + me() + "\",state=\"joined\"}", 2) ==
        2);
  t = n.scrape();
  CHECK(value(t, "muster_jobs") == 1);
  CHECK(value(t, "muster_requests_total{type=\"join\"}") == 2);
  CHECK(value(t, "muster_request_duration_seconds_count{type=\"join\"}") == 2);
  CHECK(value(t, "muster_job_world_size{job_id=\"train\",owner=\"" + me() + "\"}") == 2);
  std::regex leased(
      R"re(muster_gpu_leased\{gpu="(\d)",uuid="[^"]*",job_id="train",owner="\d+"\} 1)re");
  CHECK(std::distance(std::sregex_iterator(t.begin(), t.end(), leased), std::sregex_iterator()) ==
        2);
  // dcgm-exporter's files: the job id, one line, per leased GPU.
  CHECK(test::slurp_or_missing(n.mapping() + "/0") == "train\n");
  CHECK(test::slurp_or_missing(n.mapping() + "/1") == "train\n");

  // A bad request is counted by its error code.
  double not_found = value(t, "muster_error_replies_total{code=\"not_found\"}");
  {
    Client c({n.endpoint});
    c.join({"kv", 1, false, -1});
    CHECK(test::code_of([&] { c.get("absent", 0ms); }) == ErrorCode::kNotFound);
    c.set("k", std::string(1000, 'x'));
    CHECK(n.await("muster_error_replies_total{code=\"not_found\"}", not_found + 1) ==
          not_found + 1);
    t = n.scrape();
    CHECK(value(t, "muster_store_bytes{job_id=\"kv\",owner=\"" + me() + "\"}") == 1001);
    CHECK(value(t, "muster_requests_total{type=\"store_set\"}") == 1);
    CHECK(value(t, "muster_state_save_duration_seconds_count") >= 1);
    CHECK(value(t, "muster_state_save_failures_total") == 0);
  }

  // A rank ends: its GPU is free again, in the metrics and the mapping.
  r1->signal(SIGKILL);
  r1->wait(10s);
  CHECK(n.await("muster_job_ranks{job_id=\"train\",owner=\"" + me() + "\",state=\"exited\"}", 1) ==
        1);
  CHECK(eventually([&] { return test::slurp_or_missing(n.mapping() + "/1") == "<missing>"; }, 10s));
  CHECK(test::slurp_or_missing(n.mapping() + "/0") == "train\n");
  r0->signal(SIGKILL);
  r0->wait(10s);
  CHECK(eventually([&] { return test::slurp_or_missing(n.mapping() + "/0") == "<missing>"; }, 10s));

  // The log's journal entries carry the job, the rank and the GPU.
  std::string journal = test::slurp_or_missing(n.journal());
  std::regex joined(
      "MESSAGE=job=train rank=1 pid=\\d+ device=(\\d) joined\nPRIORITY=6\n"
      "SYSLOG_IDENTIFIER=musterd\nJOB=train\nRANK=1\nGPU=(\\d)\n\n");
  std::smatch m;
  REQUIRE(std::regex_search(journal, m, joined));
  CHECK(m[1] == m[2]);
  CHECK_THAT(journal, Catch::Contains("MESSAGE=job=train ended\nPRIORITY=6\n"
                                      "SYSLOG_IDENTIFIER=musterd\nJOB=train\n\n"));
}

TEST_CASE("a key wait older than --stuck-after shows in muster_stuck_waits until it ends") {
  Node n("", {"--stuck-after", "1"});
  CHECK(value(n.scrape(), "muster_stuck_waits_detected_total") == 0);
  // A rank waits 6 s for a key nobody sets.
  std::thread waiter([&] {
    Client c({n.endpoint});
    c.join({"hang", 1, false, -1});
    CHECK(test::code_of([&] { c.get("never", 6000ms); }) == ErrorCode::kTimeout);
  });
  CHECK(n.await("muster_stuck_waits{job_id=\"hang\",owner=\"" + me() + "\"}", 1) == 1);
  std::string t = n.scrape();
  CHECK(value(t, "muster_stuck_waits_detected_total") == 1);
  CHECK(value(t, "muster_parked_waits{job_id=\"hang\",owner=\"" + me() + "\"}") == 1);
  waiter.join();
  // The wait timed out: nothing is stuck now, but the detection is counted.
  CHECK(n.await("muster_stuck_waits{job_id=\"hang\",owner=\"" + me() + "\"}", 0) == 0);
  CHECK(value(n.scrape(), "muster_stuck_waits_detected_total") == 1);
}

TEST_CASE("/healthz is 200 while the loop turns, and other paths are 404") {
  Node n;
  Reply h = get(n.metrics, "/healthz");
  CHECK(h.status == 200);
  CHECK(h.body == "ok\n");
  CHECK(get(n.metrics, "/").status == 404);
  CHECK(get(n.metrics, "/metrics/extra").status == 404);
  // The daemon stopped: nobody listens any more.
  n.proc->signal(SIGTERM);
  REQUIRE(n.proc->wait(20s).has_value());
  CHECK(get(n.metrics, "/healthz").status == 0);
}

TEST_CASE("clients that never send or never read hold up neither scrapes nor the daemon") {
  Node n;
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) {
    int fd = connect_to(n.metrics);
    REQUIRE(fd >= 0);
    idle.push_back(fd);
  }
  // Asks for the metrics with a tiny receive buffer, then never reads.
  for (int i = 0; i < 4; ++i) {
    int fd = connect_to(n.metrics);
    REQUIRE(fd >= 0);
    int small = 1024;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
    REQUIRE(::send(fd, req.data(), req.size(), MSG_NOSIGNAL) > 0);
    idle.push_back(fd);
  }
  for (int i = 0; i < 3; ++i) {
    Reply r = get(n.metrics, "/metrics");
    CHECK(r.status == 200);
    CHECK_THAT(r.body, Catch::Contains("muster_uptime_seconds "));
  }
  CHECK(get(n.metrics, "/healthz").status == 200);
  Client c({n.endpoint, 5s});
  CHECK(c.status().pid == n.proc->pid());
  auto r0 = rank(n, "still-served", 1, 0);
  for (int fd : idle) ::close(fd);
}

namespace {

// A small tmpfs of our own for the state directory, unmounted at the end.
struct SmallDisk {
  TempDir dir;
  SmallDisk() {
    if (::mount("tmpfs", dir.path().c_str(), "tmpfs", 0, "size=512k,mode=0700") != 0) {
      std::printf("SKIP: cannot mount a tmpfs for the state directory (%s); needs root\n",
                  std::strerror(errno));
      std::fflush(stdout);
      std::_Exit(77);
    }
  }
  ~SmallDisk() { ::umount2(dir.path().c_str(), MNT_DETACH); }
  void fill() const {
    int fd = ::open((dir.path() + "/filler").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    REQUIRE(fd >= 0);
    char block[4096] = {};
    while (::write(fd, block, sizeof block) > 0) {
    }
    while (::write(fd, block, 1) == 1) {
    }
    ::close(fd);
  }
  void free_up() const { REQUIRE(::unlink((dir.path() + "/filler").c_str()) == 0); }
};

}  // namespace

TEST_CASE("/healthz turns 503 while the state directory is full, and 200 once it has room",
          "[full-disk]") {
  SmallDisk disk;
  Node n(disk.dir.path());
  Client c({n.endpoint});
  c.join({"kv", 1, false, -1});
  c.set("before", "1");
  CHECK(get(n.metrics, "/healthz").status == 200);

  disk.fill();
  // Changes until one is refused (some room was reserved before).
  bool refused = false;
  for (int i = 0; i < 1000 && !refused; ++i)
    refused = test::code_of([&] { c.add("n", 1); }) == ErrorCode::kStorageFailed;
  REQUIRE(refused);
  Reply h;
  CHECK(eventually(
      [&] {
        h = get(n.metrics, "/healthz");
        return h.status == 503;
      },
      10s));
  CHECK_THAT(h.body, Catch::Contains("cannot save its state"));
  CHECK_THAT(h.body, Catch::Contains("No space left on device"));
  CHECK(value(n.scrape(), "muster_state_changes_refused_total") >= 1);

  disk.free_up();
  c.set("after", "1");
  CHECK(eventually([&] { return get(n.metrics, "/healthz").status == 200; }, 10s));
}

TEST_CASE("/healthz answers under a slowloris from many loopback addresses", "[hostile]") {
  Node n;
  const auto colon = n.metrics.rfind(':');
  const uint16_t port = static_cast<uint16_t>(std::stoi(n.metrics.substr(colon + 1)));
  // 200 connections from 50 addresses of 127.0.0.0/8 (4 each, under the
  // per-address limit), each sending its request one byte every 500 ms (an
  // idle timeout restarts with each), opened again as soon as one ends.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reopened{0};
  std::thread loris([&] {
    auto open_one = [&](int i) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in src{};
      src.sin_family = AF_INET;
      src.sin_addr.s_addr = htonl(0x7f000002u + static_cast<uint32_t>(i % 50));
      sockaddr_in dst{};
      dst.sin_family = AF_INET;
      dst.sin_port = htons(port);
      dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
          ::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
        ::close(fd);
        return -1;
      }
      ::fcntl(fd, F_SETFL, O_NONBLOCK);
      return fd;
    };
    std::vector<int> fds(200, -1);
    const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    std::vector<size_t> sent(200, 0);
    while (!stop) {
      for (int i = 0; i < 200 && !stop; ++i) {
        char c;
        if (fds[i] >= 0 && ::recv(fds[i], &c, 1, MSG_DONTWAIT) == 0) {
          ::close(fds[i]);
          fds[i] = -1;
        }
        if (fds[i] < 0) {
          fds[i] = open_one(i);
          sent[i] = 0;
          ++reopened;
          continue;
        }
        char b = sent[i] < req.size() ? req[sent[i]] : 'a';
        if (::send(fds[i], &b, 1, MSG_NOSIGNAL) == 1) {
          ++sent[i];
        } else {
          ::close(fds[i]);
          fds[i] = -1;
        }
      }
      std::this_thread::sleep_for(500ms);
    }
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  });
  std::this_thread::sleep_for(1500ms);   // the slots are taken
  test::LatencyProbe probe(n.endpoint);  // the daemon's own clients meanwhile
  int answered = 0;
  for (int i = 0; i < 5; ++i) {
    answered += get(n.metrics, "/healthz").status == 200;
    std::this_thread::sleep_for(400ms);
  }
  CHECK_OTHERS_SERVED(probe, "the slowloris");
  stop = true;
  loris.join();
  INFO("slowloris connections opened: " << reopened.load());
  CHECK(answered == 5);
  Client c({n.endpoint, 5s});
  CHECK(c.status().pid == n.proc->pid());
}
