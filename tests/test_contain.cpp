// Containment (issue #17): whatever a job starts ends with it, however it
// hides, and a broadcast root killed mid-broadcast leaves nothing in
// /dev/shm. The [cgroup] cases need a writable cgroup v2 hierarchy and exit
// 77 (skip) without one; the others run on any machine.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>

#include "muster/client.hpp"
#include "support/muster_cli.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::Process;

namespace {

std::string containment_of(const test::TestDaemon& d) {
  Client c({d.endpoint()});
  return c.status().containment;
}

// One worker that starts a grandchild each way a process escapes its
// parent's group, session or environment, prints every pid (its own first)
// and waits:
//   a double fork (the middle shell exits: the sleep is an orphan),
//   setsid (a session of its own), nohup (SIGHUP ignored),
//   env -i setsid -f (no MUSTER_RUN_GUARD token, a new session, an orphan).
const char* kEscapes =
    "echo $$; "
    "/bin/sh -c '/bin/sleep 1000 & echo $!'; "
    "/usr/bin/setsid /bin/sleep 1000 & echo $!; "
    "/usr/bin/nohup /bin/sleep 1000 >/dev/null 2>&1 & echo $!; "
    "/usr/bin/env -i /usr/bin/setsid -f /bin/sh -c 'echo $$; exec /bin/sleep 1000'; "
    "wait";
constexpr size_t kEscapePids = 5;

std::unique_ptr<Process> run_escapes(const test::TestDaemon& d) {
  return std::make_unique<Process>(
      std::vector<std::string>{test::program("MUSTER_TEST_MUSTER"), "run", "-n", "1", "--cpu",
                               "--use-env", "/bin/sh", "-c", kEscapes},
      std::map<std::string, std::string>{{"MUSTER_ENDPOINT", d.endpoint()}});
}

// The cgroup v2 path of pid ("0::" line of /proc/PID/cgroup).
std::string cgroup_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return "";
}

// The names in /dev/shm that start with prefix.
std::set<std::string> shm_entries(const std::string& prefix) {
  std::set<std::string> names;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) names.insert(e->d_name);
    ::closedir(d);
  }
  return names;
}

// The base of d's job cgroups, from its containment ("cgroup BASE"); where
// it has none (no writable cgroup v2 hierarchy) the test is skipped: exit
// 77, which meson counts as a skip.
std::string cgroup_base_or_skip(const test::TestDaemon& d) {
  const std::string how = containment_of(d);
  if (how.rfind("cgroup ", 0) != 0) {
    std::cout << "SKIP: no writable cgroup v2 hierarchy here: the daemon says containment is "
              << how << "\n";
    std::exit(77);
  }
  return how.substr(7);
}

}  // namespace

TEST_CASE("with a cgroup per job, nothing a worker starts outlives a SIGKILLed muster run",
          "[cgroup]") {
  test::TestDaemon d;
  const std::string base = cgroup_base_or_skip(d);
  auto p = run_escapes(d);
  auto pids = test::read_pids(*p, kEscapePids);
  REQUIRE(pids.size() == kEscapePids);
  // Every one of them, the env -i one included, is in the job's cgroup,
  // below this daemon's.
  std::string job_cgroup = cgroup_of(pids[0]);
  INFO("worker's cgroup: " << job_cgroup << ", daemon's: " << base);
  REQUIRE(job_cgroup.find("/job-") != std::string::npos);
  std::string job_dir = base + job_cgroup.substr(job_cgroup.rfind('/'));
  REQUIRE(::access(job_dir.c_str(), F_OK) == 0);
  for (auto pid : pids) {
    INFO("pid " << pid);
    CHECK(test::process_exists(pid));
    CHECK(cgroup_of(pid) == job_cgroup);
  }
  p->signal(SIGKILL);
  CHECK(p->wait(5s) == 128 + SIGKILL);
  for (auto pid : pids) {
    INFO("pid " << pid << " survived");
    CHECK(test::eventually([&] { return !test::process_exists(pid); }, 5s));
  }
  // The job's cgroup goes with it, and the daemon's, which held only it.
  CHECK(test::eventually([&] { return ::access(job_dir.c_str(), F_OK) != 0; }, 5s));
  CHECK(test::eventually([&] { return ::access(base.c_str(), F_OK) != 0; }, 5s));
}

TEST_CASE("with a cgroup per job, a launcher's death ends a worker that outlived it", "[cgroup]") {
  test::TestDaemon d;
  cgroup_base_or_skip(d);
  // The worker turns its parent-death signal off, so it lives on as a
  // registered rank after muster run; with the guardian killed first,
  // only the daemon (which watches the launcher) can end it.
  Process p({test::program("MUSTER_TEST_MUSTER"), "run", "-n", "1", "--cpu", "--use-env",
             "/usr/bin/python3", "-c",
             "import ctypes, os, time\n"
             "ctypes.CDLL(None).prctl(1, 0)  # PR_SET_PDEATHSIG: none\n"
             "print(os.getpid(), os.environ['MUSTER_RUN_GUARD'], flush=True)\n"
             "time.sleep(1000)\n"},
            {{"MUSTER_ENDPOINT", d.endpoint()}});
  std::istringstream line(test::unprefixed(p.read_line(20s).value_or("")));
  pid_t worker = 0;
  std::string guard;
  line >> worker >> guard;
  REQUIRE(worker > 0);
  auto last = guard.substr(guard.rfind(',') == std::string::npos ? 0 : guard.rfind(',') + 1);
  pid_t guardian = static_cast<pid_t>(std::stoi(last.substr(0, last.find('-'))));
  REQUIRE(::kill(guardian, SIGKILL) == 0);
  REQUIRE(test::eventually([&] { return !test::process_exists(guardian); }, 5s));
  p.signal(SIGKILL);
  CHECK(p.wait(5s) == 128 + SIGKILL);
  CHECK(test::eventually([&] { return !test::process_exists(worker); }, 5s));
}

TEST_CASE("a job's cgroup is killed and removed when the job ends normally", "[cgroup]") {
  test::TestDaemon d;
  cgroup_base_or_skip(d);
  // The worker leaves a daemon of its own behind (new session, no token)
  // and exits 0: muster run is done, the job ends, and so does the daemon.
  Process p(
      {test::program("MUSTER_TEST_MUSTER"), "run", "-n", "1", "--cpu", "--use-env", "/bin/sh", "-c",
       "/usr/bin/env -i /usr/bin/setsid -f /bin/sh -c 'echo $$; exec /bin/sleep 1000'; "
       "/bin/sleep 0.5"},
      {{"MUSTER_ENDPOINT", d.endpoint()}});
  auto pids = test::read_pids(p, 1);
  REQUIRE(pids.size() == 1);
  CHECK(p.wait(20s) == 0);
  CHECK(test::eventually([&] { return !test::process_exists(pids[0]); }, 5s));
}

TEST_CASE(
    "the guardian fallback: muster status says so, and a worker's children die with a "
    "SIGKILLed muster run") {
  test::TestDaemon d({"--containment", "guardian"});
  std::string how = containment_of(d);
  CHECK(how == "guardian (--containment guardian)");
  Process status({test::program("MUSTER_TEST_MUSTER"), "status"},
                 {{"MUSTER_ENDPOINT", d.endpoint()}});
  CHECK(status.read_all(10s).find("containment: guardian (--containment guardian)") !=
        std::string::npos);

  auto p = run_escapes(d);
  auto pids = test::read_pids(*p, kEscapePids);
  REQUIRE(pids.size() == kEscapePids);
  for (auto pid : pids) {
    INFO("pid " << pid);
    CHECK(test::process_exists(pid));
    CHECK(cgroup_of(pid).find("/job-") == std::string::npos);  // no cgroup of ours
  }
  // The fallback's known window: muster run tells its guardian of an
  // orphan it inherited within a quarter second (a cgroup has none).
  ::usleep(600 * 1000);
  p->signal(SIGKILL);
  CHECK(p->wait(5s) == 128 + SIGKILL);
  for (auto pid : pids) {
    INFO("pid " << pid << " survived");
    CHECK(test::eventually([&] { return !test::process_exists(pid); }, 5s));
  }
}

namespace {

struct Ranks {
  std::unique_ptr<Process> root, reader;
  pid_t root_pid = -1, reader_pid = -1;
};

// Two ranks of job: the root broadcasts at once through a segment, the
// reader comes after reader_delay seconds.
Ranks start_broadcast(const test::TestDaemon& d, const std::string& job, int reader_delay) {
  std::map<std::string, std::string> env = {{"MUSTER_ENDPOINT", d.endpoint()},
                                            {"MUSTER_BCAST", "shm"}};
  auto rank = [&](int r) {
    return std::make_unique<Process>(
        std::vector<std::string>{test::program("MUSTER_TEST_BCAST"), job, "2", std::to_string(r),
                                 std::to_string(8 << 20), std::to_string(reader_delay)},
        env);
  };
  Ranks k;
  k.root = rank(0);
  k.reader = rank(1);
  std::smatch m;
  std::regex pid_line("pid=(\\d+) rank=(\\d+)");
  for (auto* p : {k.root.get(), k.reader.get()}) {
    std::string line = p->read_line(20s).value_or("");
    if (std::regex_search(line, m, pid_line))
      (p == k.root.get() ? k.root_pid : k.reader_pid) = std::stoi(m[1]);
  }
  return k;
}

}  // namespace

TEST_CASE("a broadcast root SIGKILLed mid-broadcast: the surviving rank removes its segment") {
  test::TestDaemon d({"--containment", "guardian"});  // the daemon's cleanup waits for the job
  std::string job = "contain-shm-" + std::to_string(::getpid());
  std::string prefix = "muster." + job + ".";
  REQUIRE(shm_entries(prefix).empty());
  auto k = start_broadcast(d, job, 2);
  REQUIRE(k.root_pid > 0);
  REQUIRE(k.reader_pid > 0);
  // The root made its segment and waits in the broadcast for the reader.
  REQUIRE(test::eventually([&] { return shm_entries(prefix).size() == 1; }, 10s));
  auto during = shm_entries(prefix);
  INFO("segment: " << *during.begin());
  CHECK(during.begin()->find(".p" + std::to_string(k.root_pid) + ".") != std::string::npos);
  REQUIRE(::kill(k.root_pid, SIGKILL) == 0);
  // The reader comes, finds the root gone, says so, and removes the segment.
  CHECK(k.reader->read_line(20s).value_or("") == "bcast=peer_exited");
  CHECK(shm_entries(prefix).empty());
  // Still alive, so the job is too: it was the reader, not the job's end.
  CHECK(test::process_exists(k.reader_pid));
  k.reader->signal(SIGKILL);
}

TEST_CASE(
    "a broadcast root SIGKILLed with no rank left: the daemon removes its segment at the "
    "job's end") {
  test::TestDaemon d({"--containment", "guardian"});
  std::string job = "contain-shm-end-" + std::to_string(::getpid());
  std::string prefix = "muster." + job + ".";
  REQUIRE(shm_entries(prefix).empty());
  auto k = start_broadcast(d, job, 1000);  // the reader never gets there
  REQUIRE(k.root_pid > 0);
  REQUIRE(k.reader_pid > 0);
  REQUIRE(test::eventually([&] { return shm_entries(prefix).size() == 1; }, 10s));
  REQUIRE(::kill(k.root_pid, SIGKILL) == 0);
  REQUIRE(::kill(k.reader_pid, SIGKILL) == 0);
  CHECK(test::eventually([&] { return shm_entries(prefix).empty(); }, 5s));
  CHECK(test::eventually(
      [&] {
        Client c({d.endpoint()});
        return c.status().jobs.empty();
      },
      5s));
}
