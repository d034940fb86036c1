// Runtime directory trust, both ways (issue #13). Attack: another user
// creates /tmp/muster-$VICTIM first and runs a daemon there, so that the
// victim's jobs talk to it. A daemon refuses a runtime directory that
// another user owns or may write; a client refuses a socket directory of
// another user (root aside) or one others may write, a daemon run by
// another user (root aside) before it sends anything, and every reply of
// one. The attacks need other users: run as root, the tests fork children
// that drop to 65534 (nobody, the attacker) and 65533 (the victim);
// elsewhere those are skipped with a warning, as in test_security.cpp.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <zmq.hpp>

#include "muster/client.hpp"
#include "protocol/envelope.hpp"
#include "support/process.hpp"
#include "support/skip.hpp"
#include "trust.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::eventually;
using test::Process;
using test::program;
using test::TempDir;

namespace {

constexpr uid_t kAttacker = 65534;  // nobody
constexpr uid_t kVictim = 65533;

bool root() {
  return ::geteuid() == 0;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Becomes uid (gid the same, no supplementary groups) for good, and dies
// with its parent (after the uid change, which clears that setting).
bool become(uid_t uid) {
  return ::setgroups(0, nullptr) == 0 && ::setresgid(uid, uid, uid) == 0 &&
         ::setresuid(uid, uid, uid) == 0 && ::prctl(PR_SET_PDEATHSIG, SIGKILL) == 0;
}

// A line on stdout, from a child.
void say(const std::string& line) {
  std::string s = line + "\n";
  for (size_t off = 0; off < s.size();) {
    ssize_t n = ::write(STDOUT_FILENO, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// say(line), then code: a child's way out.
int report(const std::string& line, int code) {
  say(line);
  return code;
}

// A forked child running body (which may exec), its stdout and stderr
// coming back through a pipe. No Catch2 macro in it (nor here: a Child may
// run inside another); libmuster Clients are fine (a forked process makes
// its own ZeroMQ context). Killed and reaped when it goes out of scope.
class Child {
 public:
  explicit Child(const std::function<int()>& body) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      int code = 1;
      try {
        code = body();
      } catch (const std::exception& e) {
        say(std::string("exception: ") + e.what());
      }
      ::_exit(code);
    }
    ::close(fds[1]);
    out_ = fds[0];
  }
  ~Child() {
    if (!status_) {
      ::kill(pid_, SIGKILL);
      wait(5s);
    }
    ::close(out_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // One line, or "" at EOF or after timeout.
  std::string line(std::chrono::milliseconds timeout) {
    return test::read_line_from(out_, buf_, timeout).value_or("");
  }
  // Everything until EOF (bounded by timeout), lines joined by " | ".
  std::string output(std::chrono::milliseconds timeout) {
    std::string all;
    for (std::string l; !(l = line(timeout)).empty();) all += (all.empty() ? "" : " | ") + l;
    return all;
  }
  // Exit code (128+signal); nullopt while still running after timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (!status_) {
      int st;
      if (::waitpid(pid_, &st, WNOHANG) == pid_)
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      else if (std::chrono::steady_clock::now() >= end)
        break;
      else
        ::usleep(5000);
    }
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buf_;
  std::optional<int> status_;
};

// A directory made by the test (root) and given to uid with mode.
std::string dir_of(const std::string& path, uid_t uid, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 || ::chown(path.c_str(), uid, uid) != 0 ||
      ::chmod(path.c_str(), mode) != 0)
    throw std::runtime_error("cannot make " + path + ": " + std::strerror(errno));
  return path;
}

// The jobs the daemon at endpoint knows, asked with a raw request (a fresh
// context, none of libmuster's checks): what of the victim's reached it.
std::string jobs_at(const std::string& endpoint) {
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 10000);
  s.connect(endpoint);
  s.send(zmq::buffer(proto::encode(1, proto::Status{})));
  zmq::message_t reply;
  if (!s.recv(reply)) return "no reply";
  auto env = proto::decode_envelope(reply.data(), reply.size());
  if (env.type != static_cast<uint16_t>(proto::MsgType::kStatusReply)) return "bad reply";
  std::string ids;
  for (const auto& j : proto::StatusReply::unpack(env.payload).jobs) ids += j.id + " ";
  return "jobs: " + ids;
}

// The attacker's musterd, run as the attacker in dir (its own), the
// directory and the socket then opened to everyone as an attacker would.
// nullptr, with the reason in why, when it does not come up.
std::unique_ptr<Child> attacker_daemon(const std::string& dir, std::string& why) {
  const std::string musterd = program("MUSTER_TEST_MUSTERD");
  auto d = std::make_unique<Child>([&] {
    if (!become(kAttacker)) return report("cannot become uid 65534", 3);
    ::execl(musterd.c_str(), musterd.c_str(), "--runtime-dir", dir.c_str(), "--no-config",
            "--log-level", "warning", "--simulate-gpus", "1", nullptr);
    return report("uid 65534 cannot run " + musterd + ": " + std::strerror(errno), 127);
  });
  const std::string sock = dir + "/musterd.sock";
  if (!eventually([&] { return ::access(sock.c_str(), F_OK) == 0 || d->wait(0ms); }, 30s) ||
      d->wait(0ms)) {
    why = "the attacker's musterd did not come up: " + d->output(1s);
    return nullptr;
  }
  // Once it answers it is done with its socket's mode (0660) and its
  // directory's (0700): the attacker opens both again.
  if (jobs_at("ipc://" + sock) != "jobs: ") {
    why = "the attacker's musterd does not answer";
    return nullptr;
  }
  ::chmod(dir.c_str(), 0755);
  ::chmod(sock.c_str(), 0666);
  return d;
}

// Run in a victim child: a libmuster client (endpoint from the environment
// as set up by the caller) joins a job and sets a secret; one line says
// what happened and how long it took. A victim that joined stays.
int victim_joins(std::chrono::milliseconds request_timeout, bool announce = false) {
  if (!become(kVictim)) return report("cannot become uid 65533", 3);
  auto start = std::chrono::steady_clock::now();
  auto ms = [&] {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - start)
                              .count());
  };
  try {
    Client c({"", request_timeout});
    if (announce) say("connected");
    c.join({"victim-job", 1, false, 0});
    c.set("secret", "42");
    say("joined ms=" + ms());
    ::sleep(60);  // the job lives on (until the test kills us) for jobs_at() to see
  } catch (const Error& e) {
    say(std::string("error=") + error_name(e.code()) + " ms=" + ms() + " " + e.what());
  }
  return 0;
}

void no_muster_env() {
  ::unsetenv("MUSTER_ENDPOINT");
  ::unsetenv("MUSTER_RUNTIME_DIR");
  ::unsetenv("XDG_RUNTIME_DIR");
}

// A victim child's body: no muster setting in its environment but
// var=value (none when var is null), then victim_joins(request_timeout,
// announce).
std::function<int()> victim_with(const char* var, const std::string& value,
                                 std::chrono::milliseconds request_timeout = 10000ms,
                                 bool announce = false) {
  return [=] {
    no_muster_env();
    if (var) ::setenv(var, value.c_str(), 1);
    return victim_joins(request_timeout, announce);
  };
}

// musterd on dir, until it exits (within 10 s); its exit code and output.
std::pair<std::optional<int>, std::string> run_musterd(const std::string& dir) {
  Process p(
      {program("MUSTER_TEST_MUSTERD"), "--runtime-dir", dir, "--no-config", "--simulate-gpus", "1"},
      {}, true);
  auto code = p.wait(10s);
  return {code, code ? p.read_all(1s) : "(still running)"};
}

}  // namespace

TEST_CASE("libzmq's Peer-Address of an ipc frame gives the sender's uid") {
  int64_t uid = -1, gid = -1, pid = -1;
  CHECK(trust::parse_peer_address("localhost:1000:100:4242", uid, gid, pid));
  CHECK((uid == 1000 && gid == 100 && pid == 4242));
  CHECK(trust::parse_peer_address(":0:0:1", uid, gid, pid));
  CHECK(uid == 0);
  // Other transports: an address only, no uid.
  CHECK_FALSE(trust::parse_peer_address("127.0.0.1", uid, gid, pid));
  CHECK_FALSE(trust::parse_peer_address("localhost:1000:x:4242", uid, gid, pid));
  CHECK_FALSE(trust::parse_peer_address("localhost:-1:0:1", uid, gid, pid));
}

TEST_CASE("musterd refuses a runtime directory that others may write, or a symlink") {
  TempDir t;
  const std::string me = std::to_string(::geteuid());
  std::string open = t.path() + "/open";
  REQUIRE(::mkdir(open.c_str(), 0700) == 0);
  REQUIRE(::chmod(open.c_str(), 0777) == 0);
  auto [code, out] = run_musterd(open);
  INFO(out);
  CHECK(code == 1);
  CHECK(contains(out, "refusing runtime directory " + open + ": its mode 0777 (owner uid " + me));
  CHECK(::access((open + "/musterd.sock").c_str(), F_OK) != 0);

  std::string mine = t.path() + "/mine", link = t.path() + "/link";
  REQUIRE(::mkdir(mine.c_str(), 0700) == 0);
  REQUIRE(::symlink(mine.c_str(), link.c_str()) == 0);
  auto [code2, out2] = run_musterd(link);
  INFO(out2);
  CHECK(code2 == 1);
  CHECK(contains(out2, "refusing runtime directory " + link + ": it is a symbolic link"));
}

TEST_CASE("musterd refuses a runtime directory that another user owns") {
  TempDir t;
  // As root: a directory the attacker made. Otherwise one of root's.
  std::string theirs = root() ? dir_of(t.path() + "/theirs", kAttacker, 0755) : "/etc";
  std::string owner = root() ? "65534" : "0";
  auto [code, out] = run_musterd(theirs);
  INFO(out);
  CHECK(code == 1);
  CHECK(contains(out, "refusing runtime directory " + theirs + ": it is owned by uid " + owner +
                          ", not by uid " + std::to_string(::geteuid())));
  CHECK(::access((theirs + "/musterd.sock").c_str(), F_OK) != 0);
}

TEST_CASE("a client refuses a world-writable socket directory, even its own, at once") {
  TempDir t;
  REQUIRE(::chmod(t.path().c_str(), 0777) == 0);
  const std::string ep = "ipc://" + t.path() + "/musterd.sock";
  try {
    Client c({ep, 5000ms});
    FAIL("a client connected to " << ep);
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.code() == ErrorCode::kPermissionDenied);
    CHECK(
        contains(e.what(), "refusing musterd's socket directory " + t.path() + ": its mode 0777"));
  }
}

TEST_CASE("the system service's layout passes: root's 0750 directory, socket 0660 to a group") {
  if (!test::root_for("run the daemon as root for another user")) return;
  TempDir t;
  REQUIRE(::chmod(t.path().c_str(), 0711) == 0);
  // Like /run/muster: root:muster 0750, the socket 0660 root:muster.
  std::string run = t.path() + "/run";
  REQUIRE(::mkdir(run.c_str(), 0750) == 0);
  REQUIRE(::chown(run.c_str(), 0, kAttacker) == 0);
  const group* g = ::getgrgid(kAttacker);
  REQUIRE(g);
  Process d({program("MUSTER_TEST_MUSTERD"), "--runtime-dir", run, "--no-config", "--log-level",
             "warning", "--socket-group", g->gr_name});
  const std::string ep = "ipc://" + run + "/musterd.sock";
  REQUIRE(eventually([&] { return ::access((run + "/musterd.sock").c_str(), F_OK) == 0; }, 30s));
  CHECK_NOTHROW(Client({ep, 10000ms}).ping());
  // A member of the group (nobody's own group 65534) reaches it too.
  Child member([&] {
    if (!become(kAttacker)) return report("cannot become uid 65534", 3);
    ::setenv("MUSTER_RUNTIME_DIR", run.c_str(), 1);
    ::unsetenv("MUSTER_ENDPOINT");
    try {
      Client c({"", 10000ms});
      say("version " + c.ping());
    } catch (const Error& e) {
      say(std::string("error=") + error_name(e.code()) + " " + e.what());
    }
    return 0;
  });
  auto said = member.line(20s);
  INFO(said);
  CHECK(contains(said, "version "));
}

TEST_CASE("a client refuses a socket directory that another user owns, before sending") {
  if (!test::root_for("run a daemon as 65534 and a client as 65533")) return;
  TempDir t;
  REQUIRE(::chmod(t.path().c_str(), 0711) == 0);
  std::string dir = dir_of(t.path() + "/squat", kAttacker, 0755);
  std::string why;
  auto attacker = attacker_daemon(dir, why);
  if (!attacker) {
    WARN("SKIP: " << why);
    return;
  }
  const std::string ep = "ipc://" + dir + "/musterd.sock";
  // The victim finds it through MUSTER_RUNTIME_DIR, as through the default.
  Child victim(victim_with("MUSTER_RUNTIME_DIR", dir));
  auto said = victim.line(20s);
  INFO(said);
  CHECK(contains(said, "error=permission_denied"));
  CHECK(contains(said, "refusing musterd's socket directory " + dir +
                           ": it is owned by uid 65534, neither yours (uid 65533) nor root's"));
  // At once: not after a request timed out.
  auto ms = std::atoi(said.c_str() + said.find("ms=") + 3);
  CHECK(ms < 2000);
  CHECK(jobs_at(ep) == "jobs: ");
  // Root as the victim: the owner must be root, and is not.
  try {
    Client c({ep, 10000ms});
    c.join({"root-job", 1, false, 0});
    FAIL("root's client joined a job at the attacker's daemon");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.code() == ErrorCode::kPermissionDenied);
    CHECK(contains(e.what(), "it is owned by uid 65534, neither yours (uid 0) nor root's"));
  }
}

TEST_CASE("a client refuses a daemon of another user, even at an explicit MUSTER_ENDPOINT") {
  if (!test::root_for("run a daemon as 65534 and a client as 65533")) return;
  TempDir t;
  REQUIRE(::chmod(t.path().c_str(), 0711) == 0);
  std::string dir = dir_of(t.path() + "/shared", kAttacker, 0755);
  const std::string ep = "ipc://" + dir + "/musterd.sock";

  SECTION("a daemon already there: refused before anything is sent") {
    std::string why;
    auto attacker = attacker_daemon(dir, why);
    if (!attacker) {
      WARN("SKIP: " << why);
      return;
    }
    Child victim(victim_with("MUSTER_ENDPOINT", ep));
    auto said = victim.line(20s);
    INFO(said);
    CHECK(contains(said, "error=permission_denied"));
    CHECK(contains(said, "refusing the musterd at " + dir +
                             "/musterd.sock: it runs as uid 65534, neither yours (uid 65533) "
                             "nor root's"));
    auto ms = std::atoi(said.c_str() + said.find("ms=") + 3);
    CHECK(ms < 2000);
    CHECK(jobs_at(ep) == "jobs: ");
  }

  SECTION("a daemon that comes after the client connected: its replies are refused") {
    // Nobody listens when the client connects, so only the replies can
    // tell (the request itself is the race the check cannot close).
    Child victim(victim_with("MUSTER_ENDPOINT", ep, 20000ms, true));
    REQUIRE(victim.line(20s) == "connected");
    std::string why;
    auto attacker = attacker_daemon(dir, why);
    if (!attacker) {
      WARN("SKIP: " << why);
      return;
    }
    auto said = victim.line(30s);
    INFO(said);
    CHECK(contains(said, "error=permission_denied"));
    CHECK(contains(said, "refusing a reply from the musterd at " + ep +
                             ": it runs as uid 65534, neither yours (uid 65533) nor root's"));
  }
}

TEST_CASE("a squatted /tmp/muster-$UID: muster run and libmuster refuse it, nothing leaks") {
  if (!root()) {
    WARN("SKIP: needs root (a mount namespace, two other users); this runs as uid " << ::geteuid());
    return;
  }
  const std::string muster = program("MUSTER_TEST_MUSTER");
  // A world of its own: a fresh /tmp in a private mount namespace, where
  // the attacker made the victim's default runtime directory first.
  Child world([&] {
    if (::unshare(CLONE_NEWNS) != 0)
      return report(std::string("skip: unshare(CLONE_NEWNS): ") + std::strerror(errno), 0);
    // The old /tmp stays reachable through a descriptor: a build tree that
    // lives there is bound back into the fresh one (the programs run).
    int old_tmp = ::open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/tmp", "tmpfs", 0, "mode=1777") != 0)
      return report(std::string("skip: mount: ") + std::strerror(errno), 0);
    for (const auto& p : {muster, program("MUSTER_TEST_MUSTERD")}) {
      if (p.rfind("/tmp/", 0) != 0) continue;
      std::string top = p.substr(0, p.find('/', 5));  // /tmp/NAME
      std::string from = "/proc/self/fd/" + std::to_string(old_tmp) + top.substr(4);
      if (::mkdir(top.c_str(), 0755) != 0) continue;  // bound already
      if (::mount(from.c_str(), top.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
        return report("skip: cannot bind " + top + " into the fresh /tmp: " + std::strerror(errno),
                      0);
    }
    const std::string dir = "/tmp/muster-" + std::to_string(kVictim);
    dir_of(dir, kAttacker, 0755);
    std::string why;
    auto attacker = attacker_daemon(dir, why);
    if (!attacker) return report("skip: " + why, 0);
    // The victim's libmuster, with nothing set: the default directory.
    Child client(victim_with(nullptr, ""));
    say("client " + client.line(20s));
    // And muster run, whose embedded daemon would go there.
    Child run([&] {
      if (!become(kVictim)) return report("cannot become uid 65533", 3);
      no_muster_env();
      ::execl(muster.c_str(), muster.c_str(), "run", "-n", "1", "--cpu", "/bin/true", nullptr);
      return report("uid 65533 cannot run " + muster + ": " + std::strerror(errno), 127);
    });
    auto out = run.output(30s);
    auto code = run.wait(10s);
    say("run exit=" + (code ? std::to_string(*code) : std::string("none")) + " " + out);
    say(jobs_at("ipc://" + dir + "/musterd.sock"));
    return 0;
  });
  auto first = world.line(60s);
  if (first.rfind("skip: ", 0) == 0) {
    WARN("SKIP: " << first.substr(6));
    return;
  }
  const std::string refusal =
      "refusing musterd's socket directory /tmp/muster-65533: it is owned "
      "by uid 65534, neither yours (uid 65533) nor root's";
  INFO(first);
  CHECK(contains(first, "client error=permission_denied"));
  CHECK(contains(first, refusal));
  auto run = world.line(60s);
  INFO(run);
  if (contains(run, "cannot run")) {
    WARN("SKIP (muster run part): " << run);
  } else {
    CHECK(contains(run, "run exit=1 "));
    CHECK(contains(run, "muster run: " + refusal));
  }
  CHECK(world.line(30s) == "jobs: ");
  CHECK(world.wait(10s) == 0);
}

TEST_CASE("a client makes a missing socket directory its own, so nobody else can squat it") {
  // Before this, a client whose default directory did not exist yet sent
  // its first request to whoever made the directory and bound the socket
  // first; the reply check came too late for that request.
  TempDir t;
  const std::string dir = t.path() + "/not-yet";
  try {
    Client c({"ipc://" + dir + "/musterd.sock", 300ms});
  } catch (const Error&) {
  }
  struct stat st {};
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK(st.st_uid == ::geteuid());
  CHECK((st.st_mode & 07777) == 0700);
}

TEST_CASE("an abstract socket nobody listens at is refused, not waited for") {
  try {
    Client c({"ipc://@muster-test-nobody-" + std::to_string(::getpid()), 300ms});
    FAIL("a client was made for an abstract name nobody binds");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kUnavailable);
  }
}
