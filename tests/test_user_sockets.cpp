// Each user's own socket beside the shared one (daemon/server/
// user_sockets.hpp): made once a connection of theirs passed the handshake,
// theirs alone (another user's connect is refused by the kernel), taken by
// libmuster when it exists, and kept across a restart so that clients that
// reconnect find it. Its purpose, a backlog another user's connect flood
// does not fill, is measured in hostile/connects.cpp.
#include <catch2/catch.hpp>

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "endpoint.hpp"
#include "muster/client.hpp"
#include "protocol/envelope.hpp"
#include "protocol/messages.hpp"
#include "server/user_sockets.hpp"
#include "support/as_user.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace muster::proto;
using namespace muster::test;
using namespace std::chrono_literals;

namespace {

// connect() to a unix socket path: 0, or the errno.
int connect_errno(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
  ::close(fd);
  return rc;
}

// "owner UID mode MODE" of a socket file, or "none".
std::string socket_file(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return "none";
  char mode[8];
  std::snprintf(mode, sizeof mode, "%o", st.st_mode & 07777);
  return "owner " + std::to_string(st.st_uid) + " mode " + mode;
}

}  // namespace

TEST_CASE(
    "a user's own socket: made after their first connection, theirs alone, kept across a "
    "restart",
    "[user_sockets]") {
  if (!root()) {
    WARN("SKIP: needs root to run other users");
    return;
  }
  test::OpenDaemon d;
  const std::string ep = d.endpoint(), users = d.runtime_dir() + "/users";
  const std::string mine = users + "/0.sock", theirs = users + "/65534.sock";
  // TestDaemon's start asked root's first request; nobody has asked none.
  REQUIRE(ask(ep, encode(1, Ping{})) == "reply=pong");
  REQUIRE(eventually([&] { return socket_file(mine) != "none"; }, 5s));
  CHECK(socket_file(theirs) == "none");
  CHECK(socket_file(mine) == "owner 0 mode 600");
  CHECK(personal_endpoint(ep) == "ipc://" + mine);
  CHECK(ask("ipc://" + mine, encode(2, Ping{})) == "reply=pong");

  // nobody: its own after its first connection; root's is not for it.
  AsNobody nobody([&](Lines& io) {
    io.say(ask(ep, encode(1, Ping{})));
    io.hear();  // the test saw the socket made
    io.say(personal_endpoint(ep));
    io.say(ask(personal_endpoint(ep), encode(2, Ping{})));
    io.say("root's " + std::string(std::strerror(connect_errno(mine))));
    // A job of nobody's, kept while this child waits: restored after the
    // daemon is killed below.
    if (io.hear() != "join") return;
    io.say(ask(ep, encode(3, Join{"kept", 1, false, ::getpid(), -1})));
    io.hear();
  });
  REQUIRE(nobody.hear() == "reply=pong");
  REQUIRE(eventually([&] { return socket_file(theirs) != "none"; }, 5s));
  CHECK(socket_file(theirs) == "owner 65534 mode 600");
  nobody.say("go");
  CHECK(nobody.hear() == "ipc://" + theirs);
  CHECK(nobody.hear() == "reply=pong");
  CHECK(nobody.hear() == "root's " + std::string(std::strerror(EACCES)));
  // A user who never connected has none, and cannot use nobody's.
  AsNobody second(
      [&](Lines& io) {
        io.say(personal_endpoint(ep));
        io.say("nobody's " + std::string(std::strerror(connect_errno(theirs))));
      },
      kSecondUser);
  CHECK(second.hear() == ep);
  CHECK(second.hear() == "nobody's " + std::string(std::strerror(EACCES)));

  // libmuster takes the user's own: with the shared socket's name gone, a
  // new client still reaches the daemon.
  const std::string shared = d.runtime_dir() + "/musterd.sock";
  REQUIRE(::rename(shared.c_str(), (shared + ".away").c_str()) == 0);
  {
    Client c({ep, 3000ms});
    CHECK_NOTHROW(c.ping());
  }
  REQUIRE(::rename((shared + ".away").c_str(), shared.c_str()) == 0);

  // A restarted daemon binds both again: clients that reconnect find them.
  REQUIRE(d.stop(10s));
  CHECK(socket_file(mine) != "none");
  d.start();
  CHECK(socket_file(mine) == "owner 0 mode 600");
  CHECK(socket_file(theirs) == "owner 65534 mode 600");
  CHECK(ask("ipc://" + mine, encode(3, Ping{})) == "reply=pong");
  // A daemon killed, and its users/ gone with it (a runtime directory made
  // anew, the state kept elsewhere): the restored job's owner gets theirs
  // back at start, before connecting.
  open_to_everyone(d);  // the restarted daemon's socket is 0660 again
  nobody.say("join");
  const std::string joined = nobody.hear();
  INFO(joined);
  REQUIRE(starts_with(joined, "reply=rank_info"));
  d.kill9();
  std::filesystem::remove_all(users);
  d.start();
  INFO(ask(ep, encode(4, Status{})));
  CHECK(socket_file(theirs) == "owner 65534 mode 600");
  CHECK(socket_file(mine) == "owner 0 mode 600");
  nobody.say("done");
  CHECK(process_exists(d.pid()));
}

TEST_CASE("a socket someone else owns in users/ is not taken for the caller's own",
          "[user_sockets]") {
  // The daemon's users/ holds only its own files; were it not so, a socket
  // there not owned by the caller is ignored.
  test::TempDir dir;
  const std::string users = dir.path() + "/users";
  REQUIRE(::mkdir(users.c_str(), 0755) == 0);
  const std::string ep = "ipc://" + dir.path() + "/musterd.sock";
  const std::string own = users + "/" + std::to_string(::geteuid()) + ".sock";
  // A plain file is no socket.
  FILE* f = std::fopen(own.c_str(), "w");
  REQUIRE(f);
  std::fclose(f);
  CHECK(personal_endpoint(ep) == ep);
  REQUIRE(::unlink(own.c_str()) == 0);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, own.c_str(), own.size() + 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  CHECK(personal_endpoint(ep) == "ipc://" + own);
  if (root()) {
    REQUIRE(::chown(own.c_str(), kNobody, kNobody) == 0);
    CHECK(personal_endpoint(ep) == ep);
  }
  ::close(fd);
  // Other transports and other names are left as they are.
  CHECK(personal_endpoint("tcp://127.0.0.1:5555") == "tcp://127.0.0.1:5555");
  CHECK(personal_endpoint("ipc://" + dir.path() + "/other.sock") ==
        "ipc://" + dir.path() + "/other.sock");
}

TEST_CASE("users' own sockets stop at a sixteenth of the fd limit", "[user_sockets]") {
  if (!root()) {
    WARN("SKIP: needs root to give sockets to other users");
    return;
  }
  // A limit of 32 fds: two users' sockets, the third connects through the
  // shared socket only.
  test::TempDir dir;
  zmq::context_t ctx;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  daemon::UserSockets users(router, dir.path(), 32);
  for (int64_t uid : {60001, 60002, 60003, -1, 60001}) users.want(uid);
  users.bind_wanted(true);  // the fd guard holds new connections back
  CHECK(users.bound() == 0);
  users.bind_wanted(false);
  CHECK(users.bound() == 2);
  CHECK(socket_file(users.dir() + "/60001.sock") == "owner 60001 mode 600");
  CHECK(socket_file(users.dir() + "/60002.sock") == "owner 60002 mode 600");
  CHECK(socket_file(users.dir() + "/60003.sock") == "none");
  users.want(60004);
  users.bind_wanted(false);
  CHECK(users.bound() == 2);
}

TEST_CASE("the members of the socket's group have their own sockets from the start",
          "[user_sockets]") {
  if (!root()) {
    WARN("SKIP: needs root to give sockets to other users");
    return;
  }
  // A group of this machine that lists a member (Debian's ssl-cert lists
  // postgres where PostgreSQL is installed).
  std::string group_name;
  uid_t member = 0;
  ::setgrent();
  while (group* g = ::getgrent()) {
    for (char** m = g->gr_mem; m && *m && group_name.empty(); ++m)
      if (passwd* p = ::getpwnam(*m); p && p->pw_uid != 0) {
        group_name = g->gr_name;
        member = p->pw_uid;
      }
    if (!group_name.empty()) break;
  }
  ::endgrent();
  if (group_name.empty()) {
    WARN("SKIP: no group on this machine lists a member");
    return;
  }
  TestDaemon d({"--socket-group", group_name});
  const std::string own = d.runtime_dir() + "/users/" + std::to_string(member) + ".sock";
  INFO("group " << group_name << ", member uid " << member);
  // Before the member ever connected.
  CHECK(socket_file(own) == "owner " + std::to_string(member) + " mode 600");
}
