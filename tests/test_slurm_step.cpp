// A process's Slurm step as the kernel says (common/slurm/step.hpp), on a
// fake /proc (the seam: a directory laid out like /proc), and the prolog
// hook's allocation records (common/slurm/allocation.hpp).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "slurm/allocation.hpp"
#include "slurm/step.hpp"
#include "support/process.hpp"

using muster::slurm::Step;

namespace {

// One process of the fake /proc: its cgroup file, its status (PPid and
// the four uids), its command line and its executable (a link).
void fake_process(const std::string& root, int pid, int ppid, int uid, const std::string& cgroup,
                  const std::string& exe = "/usr/bin/python3", const std::string& cmdline = "") {
  const std::string dir = root + "/" + std::to_string(pid);
  REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
  std::ofstream(dir + "/cgroup") << cgroup;
  std::ofstream(dir + "/status") << "Name:\tx\nPPid:\t" << ppid << "\nUid:\t" << uid << "\t" << uid
                                 << "\t" << uid << "\t" << uid << "\n";
  std::ofstream(dir + "/cmdline", std::ios::binary) << cmdline;
  REQUIRE(::symlink(exe.c_str(), (dir + "/exe").c_str()) == 0);
}

}  // namespace

TEST_CASE("a Slurm step from a cgroup path only below Slurm's own roots") {
  using muster::slurm::step_from_cgroup;
  CHECK(step_from_cgroup("4:freezer:/slurm/uid_1000/job_7/step_0/task_1\n") == Step{7, "0"});
  CHECK(step_from_cgroup("0::/system.slice/slurmstepd.scope/job_9/step_batch/user/task_0\n") ==
        Step{9, "batch"});
  CHECK(step_from_cgroup("12:pids:/user.slice\n3:cpuset:/slurm/uid_0/job_12/step_extern\n") ==
        Step{12, "extern"});
  // A user's own delegated subtree may hold the same names lower down.
  CHECK(!step_from_cgroup(
      "0::/user.slice/user-1000.slice/user@1000.service/slurm/uid_0/job_5/step_0\n"));
  CHECK(!step_from_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n"));
  CHECK(!step_from_cgroup("0::/slurm/uid_x/job_5/step_0\n"));
  CHECK(!step_from_cgroup("0::/system.slice/slurmstepd.scope/job_5\n"));
  CHECK(!step_from_cgroup("0::/system.slice/slurmstepd.scope/job_/step_0\n"));
  CHECK(!step_from_cgroup(""));
}

TEST_CASE("a Slurm step from slurmstepd's command line") {
  using muster::slurm::step_from_stepd_cmdline;
  CHECK(step_from_stepd_cmdline(std::string("slurmstepd: [12.0]\0\0\0", 21)) == Step{12, "0"});
  CHECK(step_from_stepd_cmdline("slurmstepd: [3.batch]") == Step{3, "batch"});
  CHECK(!step_from_stepd_cmdline("slurmstepd: [x.0]"));
  CHECK(!step_from_stepd_cmdline("python3 slurmstepd: [12.0]"));
  CHECK(!step_from_stepd_cmdline("slurmstepd: [12]"));
}

TEST_CASE("a process's step: its cgroup, else a root slurmstepd above it (fake /proc)") {
  muster::test::TempDir t;
  const std::string root = t.path();
  const muster::slurm::Proc proc{root};
  const std::string plain = "0::/user.slice/user-1000.slice/session-1.scope\n";
  // proctrack/linuxproc: task 300 under stepd 200 (root, named slurmstepd).
  fake_process(root, 200, 1, 0, "0::/system.slice/slurmd.service\n", "/usr/sbin/slurmstepd",
               std::string("slurmstepd: [42.1]\0", 19));
  fake_process(root, 300, 200, 1000, plain);
  fake_process(root, 301, 300, 1000, plain);  // its child, two levels below
  CHECK(muster::slurm::step_of(300, proc) == Step{42, "1", 200});
  CHECK(muster::slurm::step_of(301, proc) == Step{42, "1", 200});
  // The same title on a process of a user, or on another program of root's.
  fake_process(root, 400, 1, 1000, plain, "/home/u/slurmstepd", "slurmstepd: [42.1]");
  fake_process(root, 401, 400, 1000, plain);
  fake_process(root, 500, 1, 0, plain, "/usr/bin/python3", "slurmstepd: [42.1]");
  fake_process(root, 501, 500, 1000, plain);
  CHECK(!muster::slurm::step_of(401, proc));
  CHECK(!muster::slurm::step_of(501, proc));
  // An executable replaced while it runs still is slurmstepd.
  fake_process(root, 600, 1, 0, plain, "/usr/sbin/slurmstepd (deleted)", "slurmstepd: [7.0]");
  fake_process(root, 601, 600, 1000, plain);
  CHECK(muster::slurm::step_of(601, proc) == Step{7, "0", 600});
  // Debian's name for it.
  fake_process(root, 650, 1, 0, plain, "/usr/sbin/slurmstepd-wlm", "slurmstepd: [7.3]");
  fake_process(root, 651, 650, 1000, plain);
  CHECK(muster::slurm::step_of(651, proc) == Step{7, "3", 650});
  // proctrack/cgroup: the cgroup says it, whatever the parents are.
  fake_process(root, 700, 1, 1000, "0::/system.slice/slurmstepd.scope/job_8/step_2/user/task_0\n");
  CHECK(muster::slurm::step_of(700, proc) == Step{8, "2"});
  CHECK(!muster::slurm::step_of(999, proc));  // gone
  CHECK(!muster::slurm::step_of(1, proc));
}

TEST_CASE("the prolog hook's records read back as written, and nothing else reads") {
  using muster::slurm::Allocation;
  Allocation a{1000, {0, 2}};
  CHECK(muster::slurm::allocation_text(a) == "uid=1000\ngpus=0,2\n");
  CHECK(muster::slurm::parse_allocation("uid=1000\ngpus=0,2\n") == a);
  CHECK(muster::slurm::parse_allocation("uid=7\ngpus=\n") == Allocation{7, {}});
  for (const char* bad : {"", "uid=1000\n", "uid=x\ngpus=0\n", "uid=1\ngpus=0,,1\n",
                          "uid=1\ngpus=0\nmore\n", "gpus=0\nuid=1\n", "uid=1\ngpus=9999\n"}) {
    INFO(bad);
    CHECK(!muster::slurm::parse_allocation(bad));
  }
  CHECK(muster::slurm::parse_gpu_list("1,3") == std::vector<int64_t>{1, 3});
  CHECK(!muster::slurm::parse_gpu_list("1-3"));
}
