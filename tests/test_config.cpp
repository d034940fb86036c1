// musterd's config file: read and checked line by line, errors that name the
// key and the line, exit 2 before anything is bound; --check-config.
#include <catch2/catch.hpp>

#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <set>

#include "muster/client.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::Process;
using test::TempDir;

namespace {

std::string write_file(const TempDir& dir, const std::string& name, const std::string& text) {
  std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

struct Outcome {
  int code = -1;
  std::string output;  // stdout and stderr
};

Outcome run_musterd(std::vector<std::string> args) {
  args.insert(args.begin(), test::program("MUSTER_TEST_MUSTERD"));
  Process p(args, {}, true);
  Outcome o;
  o.output = p.read_all(10s);
  o.code = p.wait(10s).value_or(-1);
  return o;
}

bool exists(const std::string& path) {
  return access(path.c_str(), F_OK) == 0;
}

// musterd with a config file whose third line is `line` (its runtime-dir rt
// on the first) exits 2 before binding, naming the line, the key and, when
// not empty, `says`.
void check_bad_line(const TempDir& dir, const std::string& rt, const std::string& line,
                    const std::string& key, const std::string& says) {
  auto conf = write_file(dir, "musterd.conf", "runtime-dir = " + rt + "\n# two\n" + line + "\n");
  auto o = run_musterd({"--config", conf});
  INFO(line << "\n" << o.output);
  CHECK(o.code == 2);
  CHECK(o.output.find("line 3") != std::string::npos);
  CHECK(o.output.find("'" + key + "'") != std::string::npos);
  if (!says.empty()) CHECK(o.output.find(says) != std::string::npos);
  CHECK_FALSE(exists(rt));
}

// A daemon that serves until the test ends.
struct Running {
  std::unique_ptr<Process> proc;
  std::string socket;
  Running(std::vector<std::string> args, const std::string& runtime_dir) {
    args.insert(args.begin(), test::program("MUSTER_TEST_MUSTERD"));
    proc = std::make_unique<Process>(args);
    socket = runtime_dir + "/musterd.sock";
    bool up = test::eventually(
        [&] {
          if (!exists(socket)) return false;
          try {
            Client c({"ipc://" + socket, 200ms});
            c.ping();
            return true;
          } catch (const Error&) {
            return false;
          }
        },
        10s);
    if (!up) throw std::runtime_error("musterd did not come up in " + runtime_dir);
  }
  ~Running() {
    proc->signal(SIGTERM);
    if (!proc->wait(5s)) proc->signal(SIGKILL);
  }
  DaemonStatus status() { return Client({"ipc://" + socket, 2000ms}).status(); }
};

}  // namespace

TEST_CASE("musterd takes its settings from the config file") {
  TempDir dir;
  std::string rt = dir.path() + "/rt";
  auto conf = write_file(dir, "musterd.conf",
                         "# a comment\n"
                         "\n"
                         "runtime-dir = " +
                             rt +
                             "\n"
                             "simulate-gpus=3   # trailing comment\n"
                             "  log-level = warning\n"
                             "devices = 0,2\n");
  Running d({"--config", conf}, rt);
  auto s = d.status();
  REQUIRE(s.devices.size() == 2);
  CHECK(s.devices[0].index == 0);
  CHECK(s.devices[1].index == 2);
}

TEST_CASE("command-line options win over the config file's") {
  TempDir dir;
  std::string rt = dir.path() + "/rt";
  auto conf = write_file(dir, "musterd.conf", "runtime-dir = " + rt + "\nsimulate-gpus = 3\n");
  Running d({"--config", conf, "--simulate-gpus", "5", "--log-level", "warning"}, rt);
  CHECK(d.status().devices.size() == 5);
}

TEST_CASE("an unknown key exits 2 with the key and the line, before binding") {
  TempDir dir;
  std::string rt = dir.path() + "/rt";
  auto conf = write_file(dir, "musterd.conf",
                         "runtime-dir = " + rt + "\nsimulate-gpus = 2\n\nsimulate-gpu = 4\n");
  auto o = run_musterd({"--config", conf});
  INFO(o.output);
  CHECK(o.code == 2);
  CHECK(o.output.find("line 4") != std::string::npos);
  CHECK(o.output.find("'simulate-gpu'") != std::string::npos);
  CHECK(o.output.find(conf) != std::string::npos);
  CHECK_FALSE(exists(rt));
}

TEST_CASE("a bad value exits 2 with the key, the value and the line, before binding") {
  TempDir dir;
  std::string rt = dir.path() + "/rt";
  for (const auto& [line, key] : std::vector<std::pair<std::string, std::string>>{
           {"simulate-gpus = lots", "simulate-gpus"},
           {"simulate-gpus = 100000", "simulate-gpus"},
           {"log-level = chatty", "log-level"},
           {"devices = 0,x", "devices"},
           {"runtime-dir = relative/dir", "runtime-dir"},
           {"socket-group = no-such-group-for-muster", "socket-group"}}) {
    check_bad_line(dir, rt, line, key, "");
  }
}

TEST_CASE("a key set twice, a line without '=' and a section are errors with their line") {
  TempDir dir;
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"log-level = info\nlog-level = debug\n", "line 2"},
           {"log-level info\n", "line 1"},
           {"# x\n[daemon]\nlog-level = info\n", "line 2"}}) {
    auto conf = write_file(dir, "musterd.conf", text);
    auto o = run_musterd({"--config", conf, "--check-config"});
    INFO(text << "\n" << o.output);
    CHECK(o.code == 2);
    CHECK(o.output.find(want) != std::string::npos);
  }
}

TEST_CASE("--check-config says whether the file is good and exits 0 or 2") {
  TempDir dir;
  auto good = write_file(dir, "good.conf", "simulate-gpus = 2\nlog-level = debug\n");
  auto o = run_musterd({"--check-config", "--config", good});
  INFO(o.output);
  CHECK(o.code == 0);
  CHECK(o.output.find("configuration OK") != std::string::npos);
  CHECK(o.output.find(good) != std::string::npos);

  auto bad = write_file(dir, "bad.conf", "simulate-gpus = 2\nnonsense = 1\n");
  o = run_musterd({"--check-config", "--config", bad});
  CHECK(o.code == 2);
  CHECK(o.output.find("line 2") != std::string::npos);
  CHECK(o.output.find("'nonsense'") != std::string::npos);

  o = run_musterd({"--check-config", "--config", dir.path() + "/missing.conf"});
  CHECK(o.code == 2);
  CHECK(o.output.find("missing.conf") != std::string::npos);

  // --no-config and --config '' read nothing, so the bad file is not seen.
  o = run_musterd({"--check-config", "--no-config"});
  CHECK(o.code == 0);
  o = run_musterd({"--check-config", "--config", ""});
  CHECK(o.code == 0);
  CHECK(o.output.find("no config file") != std::string::npos);
}

TEST_CASE("the example config is valid and documents every option of --help") {
  std::string example = test::program("MUSTER_TEST_CONF_EXAMPLE");
  auto o = run_musterd({"--check-config", "--config", example});
  INFO(o.output);
  CHECK(o.code == 0);

  auto help = run_musterd({"--help"});
  REQUIRE(help.code == 0);
  std::ifstream in(example);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The settings are the options after the "daemon settings" heading.
  auto settings = help.output.substr(help.output.find("daemon settings"));
  std::regex opt("\\n  --([a-z-]+)");
  std::set<std::string> names;
  for (std::sregex_iterator it(settings.begin(), settings.end(), opt), end; it != end; ++it)
    names.insert((*it)[1]);
  REQUIRE(names.size() >= 5);
  for (const auto& name : names) {
    INFO(name);
    CHECK(std::regex_search(text, std::regex("\\n# " + name + " =")));
  }
}

TEST_CASE("--socket-group gives the socket to that group, mode 0660") {
  // A group we may chown to: root may use any, others one of their own.
  gid_t gid = 0;
  std::vector<gid_t> groups(getgroups(0, nullptr) + 1);
  int n = getgroups(static_cast<int>(groups.size()), groups.data());
  for (int i = 0; i < n; ++i)
    if (groups[i] != getegid()) gid = groups[i];
  if (gid == 0 && geteuid() == 0) gid = 1;
  if (gid == 0) {
    WARN("no second group to test --socket-group with");
    return;
  }
  struct group* g = getgrgid(gid);
  std::string name = g ? g->gr_name : std::to_string(gid);
  TempDir dir;
  std::string rt = dir.path() + "/rt";
  Running d({"--no-config", "--runtime-dir", rt, "--simulate-gpus", "1", "--socket-group", name,
             "--log-level", "warning"},
            rt);
  struct stat st {};
  REQUIRE(stat(d.socket.c_str(), &st) == 0);
  CHECK(st.st_gid == gid);
  CHECK((st.st_mode & 0777) == 0660);
}

namespace {

// A key pair from `muster keygen --out` in dir; returns the file and the
// public key (the line keygen prints on stdout).
std::pair<std::string, std::string> keygen(const TempDir& dir, const std::string& name) {
  std::string path = dir.path() + "/" + name;
  Process p({test::program("MUSTER_TEST_MUSTER"), "keygen", "--out", path});
  std::string line = p.read_all(10s);
  if (p.wait(10s) != 0) throw std::runtime_error("muster keygen --out " + path + " failed");
  return {path, line.substr(0, 40)};
}

// The `name = value` line of a key file.
std::string key_line(const std::string& file, const std::string& name) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + " = ", 0) == 0) return line;
  return "";
}

}  // namespace

TEST_CASE("the peering settings are accepted from the config file and the command line") {
  TempDir dir;
  auto [key_file, pub] = keygen(dir, "peer.key");
  auto [other_file, other_pub] = keygen(dir, "other.key");
  auto authorized =
      write_file(dir, "authorized", "# the cluster\n" + other_pub + "  # node2\n" + pub + "\n");
  auto conf = write_file(dir, "musterd.conf",
                         "peer-bind = 0.0.0.0   # all interfaces\n"
                         "peer-port = 0\n"
                         "peer-timeout = 2.5\n"
                         "peer-key-file = " +
                             key_file +
                             "\n"
                             "peer-authorized-keys = " +
                             authorized + "\npeer-server-key = " + other_pub + "\n");
  auto o = run_musterd({"--check-config", "--config", conf});
  INFO(o.output);
  CHECK(o.code == 0);
  CHECK(o.output.find("configuration OK") != std::string::npos);

  o = run_musterd({"--check-config", "--no-config", "--peer-bind", "127.0.0.1", "--peer-plain",
                   "--peer-port", "29401", "--peer-timeout", "0.25"});
  CHECK(o.code == 0);
  auto plain = write_file(dir, "plain.conf", "peer-bind = ::\npeer-plain = true\n");
  o = run_musterd({"--check-config", "--config", plain});
  CHECK(o.code == 0);
  // A key with '#' inside is no comment (Z85 has '#'; no key starts with it).
  auto hash =
      write_file(dir, "hash.conf",
                 "peer-plain = false\npeer-key-file = " + key_file + "\npeer-server-key = 0" +
                     other_pub.substr(1, 1) + "#" + other_pub.substr(3) + "\n");
  o = run_musterd({"--check-config", "--config", hash});
  CHECK(o.code == 0);
}

TEST_CASE("bad peering values exit 2 with the option and the line") {
  TempDir dir;
  std::string rt = dir.path() + "/rt";
  auto [key_file, pub] = keygen(dir, "peer.key");
  auto bad_keys = write_file(dir, "bad-authorized", pub + "\nnot-a-key\n");
  for (const auto& [line, key, says] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"peer-port = 65536", "peer-port", "between 0 and 65535"},
           {"peer-port = any", "peer-port", "any"},
           {"peer-timeout = 0", "peer-timeout", "seconds"},
           {"peer-timeout = -1", "peer-timeout", "seconds"},
           {"peer-timeout = soon", "peer-timeout", "soon"},
           {"peer-bind = tcp://0.0.0.0", "peer-bind", "not an endpoint"},
           {"peer-bind = 0.0.0.0:29400", "peer-bind", "--peer-port"},
           {"peer-plain = maybe", "peer-plain", "maybe"},
           {"peer-plain =", "peer-plain", "true or false"},
           {"peer-key-file = " + dir.path() + "/missing.key", "peer-key-file", "missing.key"},
           {"peer-authorized-keys = " + bad_keys, "peer-authorized-keys", "line 2"},
           {"peer-server-key = abc", "peer-server-key", "3 characters"}}) {
    check_bad_line(dir, rt, line, key, says);
  }
  auto o = run_musterd({"--check-config", "--no-config", "--peer-timeout", "0"});
  CHECK(o.code == 2);
  CHECK(o.output.find("--peer-timeout") != std::string::npos);
  o = run_musterd({"--check-config", "--no-config", "--peer-port", "-1"});
  CHECK(o.code == 2);
  CHECK(o.output.find("--peer-port") != std::string::npos);
}

TEST_CASE("peering needs a key pair unless plain is said outright, and not both") {
  TempDir dir;
  std::string rt = dir.path() + "/rt";
  auto [key_file, pub] = keygen(dir, "peer.key");
  auto [other_file, other_pub] = keygen(dir, "other.key");

  // A listener without keys: the sentence says what to do.
  auto o = run_musterd({"--no-config", "--runtime-dir", rt, "--peer-bind", "127.0.0.1"});
  INFO(o.output);
  CHECK(o.code == 2);
  CHECK(o.output.find("muster keygen") != std::string::npos);
  CHECK(o.output.find("peer-plain") != std::string::npos);
  CHECK_FALSE(exists(rt));

  // Authorised keys or a server key without a pair of our own.
  auto authorized = write_file(dir, "authorized", other_pub + "\n");
  o = run_musterd({"--check-config", "--no-config", "--peer-authorized-keys", authorized});
  CHECK(o.code == 2);
  CHECK(o.output.find("key pair") != std::string::npos);

  // Plain and keys contradict each other.
  o = run_musterd({"--check-config", "--no-config", "--peer-plain", "--peer-key-file", key_file});
  CHECK(o.code == 2);
  CHECK(o.output.find("contradicts") != std::string::npos);

  // A key file whose secret belongs to another pair names that line.
  auto mixed = write_file(
      dir, "mixed.key",
      "# mixed up\n" + key_line(key_file, "public") + "\n" + key_line(other_file, "secret") + "\n");
  auto conf = write_file(dir, "musterd.conf", "peer-key-file = " + mixed + "\n");
  o = run_musterd({"--check-config", "--config", conf});
  CHECK(o.code == 2);
  CHECK(o.output.find("line 3: the secret key does not belong") != std::string::npos);

  // Keys without a listener are checked too; with a good pair all is well.
  o = run_musterd({"--check-config", "--no-config", "--peer-key-file", key_file, "--peer-bind",
                   "127.0.0.1", "--peer-server-key", other_pub});
  CHECK(o.code == 0);
}
