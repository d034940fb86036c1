// Security between daemons (daemon/peer/secure): CURVE sockets with the ZAP
// handler admit only authorised keys; plain or foreign clients get nothing
// through; key files and `muster keygen` output read back.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "muster/error.hpp"
#include "peer/secure.hpp"
#include "peer/zap_handler.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace muster::daemon::peer;
using namespace std::chrono_literals;

namespace {

Security secure_with(const KeyPair& own, std::vector<std::string> authorized = {},
                     std::string server_key = {}) {
  PeerSettings c;
  c.own.public_key = own.public_key;
  c.own.secret_key = own.secret_key;
  c.authorized_keys = std::move(authorized);
  c.server_key = std::move(server_key);
  return Security::from_settings(c);
}

Security plain() {
  PeerSettings c;
  c.plain = true;
  return Security::from_settings(c);
}

// A peer listener as the daemon would run it: ROUTER on loopback, the ZAP
// handler in the same context, both polled by one thread that echoes.
class Listener {
 public:
  explicit Listener(const Security& sec, bool with_zap = true) {
    if (with_zap) zap_ = std::make_unique<ZapHandler>(ctx_, sec);
    router_ = zmq::socket_t(ctx_, zmq::socket_type::router);
    router_.set(zmq::sockopt::linger, 0);
    make_server(router_, sec);
    router_.bind("tcp://127.0.0.1:*");
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { loop(); });
  }
  ~Listener() {
    stop_ = true;
    thread_.join();
    router_.close();
    zap_.reset();
  }
  const std::string& endpoint() const { return endpoint_; }
  std::vector<std::string> received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }
  std::vector<std::string> user_ids() {
    std::lock_guard<std::mutex> lock(mu_);
    return user_ids_;
  }
  uint64_t refused() const { return refused_; }
  uint64_t admitted() const { return admitted_; }

 private:
  void loop() {
    while (!stop_) {
      std::vector<zmq::pollitem_t> items{{router_.handle(), 0, ZMQ_POLLIN, 0}};
      if (zap_) items.push_back({zap_->handle(), 0, ZMQ_POLLIN, 0});
      zmq::poll(items, 20ms);
      if (zap_ && (items[1].revents & ZMQ_POLLIN)) {
        zap_->handle_ready();
        refused_ = zap_->refused();
        admitted_ = zap_->admitted();
      }
      if (items[0].revents & ZMQ_POLLIN) {
        std::vector<zmq::message_t> msg;
        while (zmq::recv_multipart(router_, std::back_inserter(msg), zmq::recv_flags::dontwait)) {
          if (msg.size() == 2) {
            const char* user = nullptr;
            try {
              user = msg[1].gets("User-Id");
            } catch (const zmq::error_t&) {
            }
            {
              std::lock_guard<std::mutex> lock(mu_);
              received_.push_back(msg[1].to_string());
              user_ids_.push_back(user ? user : "");
            }
            std::string echo = "echo:" + msg[1].to_string();
            router_.send(msg[0], zmq::send_flags::sndmore);
            router_.send(zmq::buffer(echo), zmq::send_flags::none);
          }
          msg.clear();
        }
      }
    }
  }

  zmq::context_t ctx_;
  std::unique_ptr<ZapHandler> zap_;
  zmq::socket_t router_;
  std::string endpoint_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0}, admitted_{0};
  std::mutex mu_;
  std::vector<std::string> received_, user_ids_;
};

// A connecting daemon: a DEALER in its own context, watched by a monitor.
class Dialer {
 public:
  Dialer(const Security& sec, const std::string& endpoint) {
    static std::atomic<int> n{0};
    std::string mon = "inproc://curve-monitor-" + std::to_string(n++);
    dealer_.set(zmq::sockopt::linger, 0);
    make_client(dealer_, sec);
    REQUIRE(zmq_socket_monitor(dealer_.handle(), mon.c_str(),
                               ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                   ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                   ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) == 0);
    monitor_.connect(mon);
    dealer_.connect(endpoint);
  }
  ~Dialer() {
    zmq_socket_monitor(dealer_.handle(), nullptr, 0);
    monitor_.close();
    dealer_.close();
  }
  void send(const std::string& s) { dealer_.send(zmq::buffer(s), zmq::send_flags::dontwait); }
  std::optional<std::string> receive(std::chrono::milliseconds timeout) {
    dealer_.set(zmq::sockopt::rcvtimeo, static_cast<int>(timeout.count()));
    zmq::message_t m;
    if (!dealer_.recv(m)) return std::nullopt;
    return m.to_string();
  }
  // The next handshake event (ZMQ_EVENT_*), 0 when none came in time.
  int next_event(std::chrono::milliseconds timeout) {
    monitor_.set(zmq::sockopt::rcvtimeo, static_cast<int>(timeout.count()));
    std::vector<zmq::message_t> ev;
    if (!zmq::recv_multipart(monitor_, std::back_inserter(ev)) || ev.empty() || ev[0].size() < 6)
      return 0;
    uint16_t id;
    std::memcpy(&id, ev[0].data(), sizeof id);
    std::memcpy(&last_value_, static_cast<const char*>(ev[0].data()) + 2, sizeof last_value_);
    return id;
  }
  uint32_t last_value() const { return last_value_; }

 private:
  zmq::context_t ctx_;
  zmq::socket_t dealer_{ctx_, zmq::socket_type::dealer};
  zmq::socket_t monitor_{ctx_, zmq::socket_type::pair};
  uint32_t last_value_ = 0;
};

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("a daemon with the shared key pair round-trips a message over CURVE") {
  auto keys = generate_keypair();
  auto sec = secure_with(keys);
  Listener server(sec);
  Dialer client(sec, server.endpoint());
  CHECK(client.next_event(5s) == ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
  client.send("hello");
  auto echo = client.receive(5s);
  REQUIRE(echo);
  CHECK(*echo == "echo:hello");
  REQUIRE(server.received() == std::vector<std::string>{"hello"});
  // The ZAP handler names the peer by its key (message property User-Id).
  CHECK(server.user_ids() == std::vector<std::string>{keys.public_key});
  CHECK(server.admitted() == 1);
}

TEST_CASE("a daemon whose key is in peer-authorized-keys is admitted") {
  auto server_keys = generate_keypair(), client_keys = generate_keypair();
  Listener server(secure_with(server_keys, {client_keys.public_key}));
  Dialer client(secure_with(client_keys, {}, server_keys.public_key), server.endpoint());
  CHECK(client.next_event(5s) == ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
  client.send("join");
  auto echo = client.receive(5s);
  REQUIRE(echo);
  CHECK(*echo == "echo:join");
  CHECK(server.user_ids() == std::vector<std::string>{client_keys.public_key});
}

TEST_CASE("a daemon with a key that is not authorised is refused by ZAP") {
  auto server_keys = generate_keypair(), intruder = generate_keypair();
  Listener server(secure_with(server_keys));
  // It knows the server's public key but has its own pair.
  Dialer client(secure_with(intruder, {}, server_keys.public_key), server.endpoint());
  client.send("inject chunk");
  int ev = client.next_event(5s);
  CHECK(ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
  CHECK(client.last_value() == 400);  // the ZAP status code
  CHECK_FALSE(client.receive(1s));
  CHECK(server.received().empty());
  CHECK(server.refused() >= 1);
  CHECK(server.admitted() == 0);
}

TEST_CASE("a plain client gets nothing through to a CURVE listener") {
  auto keys = generate_keypair();
  Listener server(secure_with(keys));
  Dialer client(plain(), server.endpoint());
  client.send("read the store");
  int ev = client.next_event(2s);
  CHECK(ev != ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
  CHECK_FALSE(client.receive(1s));
  CHECK(server.received().empty());
  CHECK(server.admitted() == 0);
}

TEST_CASE("a client expecting another server key does not connect") {
  auto keys = generate_keypair(), other = generate_keypair();
  Listener server(secure_with(keys));
  Dialer client(secure_with(keys, {}, other.public_key), server.endpoint());
  client.send("hello");
  CHECK(client.next_event(2s) != ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
  CHECK_FALSE(client.receive(1s));
  CHECK(server.received().empty());
}

TEST_CASE("a CURVE listener without a ZAP handler admits no one") {
  auto keys = generate_keypair();
  Listener server(secure_with(keys), /*with_zap=*/false);
  Dialer client(secure_with(keys), server.endpoint());
  client.send("hello");
  CHECK(client.next_event(2s) != ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
  CHECK_FALSE(client.receive(1s));
  CHECK(server.received().empty());
}

TEST_CASE("plain listener and plain client talk when both say so") {
  Listener server(plain());
  Dialer client(plain(), server.endpoint());
  client.send("hi");
  auto echo = client.receive(5s);
  REQUIRE(echo);
  CHECK(*echo == "echo:hi");
}

TEST_CASE("one ZAP handler per context") {
  zmq::context_t ctx;
  auto sec = secure_with(generate_keypair());
  ZapHandler first(ctx, sec);
  CHECK(has(error_of([&] { ZapHandler second(ctx, sec); }), "ZAP handler"));
}

TEST_CASE("Security::from_settings checks the peering settings") {
  auto keys = generate_keypair(), other = generate_keypair();
  SECTION("neither keys nor peer-plain") {
    auto e = error_of([] { Security::from_settings(PeerSettings{}); });
    CHECK(has(e, "muster keygen"));
    CHECK(has(e, "peer-plain"));
  }
  SECTION("a secret key of another pair") {
    PeerSettings c;
    c.own.public_key = keys.public_key;
    c.own.secret_key = other.secret_key;
    CHECK(has(error_of([&] { Security::from_settings(c); }), "does not belong"));
  }
  SECTION("only half a pair") {
    PeerSettings c;
    c.own.public_key = keys.public_key;
    CHECK(has(error_of([&] { Security::from_settings(c); }), "without its secret key"));
  }
  SECTION("a malformed key") {
    PeerSettings c;
    c.own.public_key = keys.public_key.substr(1);
    c.own.secret_key = keys.secret_key;
    CHECK(has(error_of([&] { Security::from_settings(c); }), "39 characters"));
  }
  SECTION("a bad authorised key or server key") {
    PeerSettings c;
    c.own.public_key = keys.public_key;
    c.own.secret_key = keys.secret_key;
    c.authorized_keys = {other.public_key, "nope"};
    CHECK(has(error_of([&] { Security::from_settings(c); }), "peer-authorized-keys, key 2"));
    c.authorized_keys.clear();
    c.server_key = std::string(40, '~');
    CHECK(has(error_of([&] { Security::from_settings(c); }), "peer-server-key"));
  }
  SECTION("peer-plain with keys") {
    PeerSettings c;
    c.plain = true;
    c.authorized_keys = {other.public_key};
    CHECK(has(error_of([&] { Security::from_settings(c); }), "contradicts"));
  }
  SECTION("a good pair: own key first, server key defaults to it") {
    auto s = secure_with(keys, {other.public_key, keys.public_key, other.public_key});
    CHECK_FALSE(s.plain);
    CHECK(s.authorized == std::vector<std::string>{keys.public_key, other.public_key});
    CHECK(s.server_key == keys.public_key);
    CHECK(s.authorizes(keys.public_key));
    CHECK(s.authorizes(z85_to_binary(other.public_key)));
    CHECK_FALSE(s.authorizes(generate_keypair().public_key));
    CHECK(secure_with(keys, {}, other.public_key).server_key == other.public_key);
  }
  SECTION("plain") {
    CHECK(plain().plain);
  }
}

TEST_CASE("Z85 keys: alphabet, length and range are checked") {
  auto keys = generate_keypair();
  CHECK(is_z85_key(keys.public_key));
  CHECK(is_z85_key(keys.secret_key));
  CHECK(keys.public_key.find('#') == std::string::npos);
  CHECK(public_key_of(keys.secret_key) == keys.public_key);
  CHECK(binary_to_z85(z85_to_binary(keys.public_key)) == keys.public_key);
  CHECK_FALSE(is_z85_key(""));
  CHECK_FALSE(is_z85_key(keys.public_key + "0"));
  CHECK_FALSE(is_z85_key(std::string(39, '0') + "\""));  // '"' is not Z85
  CHECK_FALSE(is_z85_key(std::string(40, '#')));         // 85^5-1 > 2^32-1
  CHECK(is_z85_key(std::string(40, '0')));
}

TEST_CASE("a key file round-trips with mode 0600 and is not overwritten by accident") {
  test::TempDir dir;
  std::string path = dir.path() + "/peer.key";
  auto keys = generate_keypair();
  write_key_file(path, keys, false);
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto back = read_key_file(path);
  CHECK(back.public_key == keys.public_key);
  CHECK(back.secret_key == keys.secret_key);

  auto fresh = generate_keypair();
  try {
    write_key_file(path, fresh, false);
    FAIL("overwrote an existing key file");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kConflict);
  }
  CHECK(read_key_file(path).public_key == keys.public_key);
  write_key_file(path, fresh, true);
  CHECK(read_key_file(path).secret_key == fresh.secret_key);
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  CHECK(has(error_of([&] { read_key_file(dir.path() + "/missing.key"); }), "missing.key"));
}

TEST_CASE("bad key files are errors that name the file and the line") {
  auto keys = generate_keypair(), other = generate_keypair();
  std::string pub = "public = " + keys.public_key + "\n";
  std::string sec = "secret = " + keys.secret_key + "\n";
  struct Case {
    std::string text, want;
  };
  for (const auto& c : std::vector<Case>{
           // No '=' at all (a Z85 key may itself hold one: not a key here).
           {"# c\n" + pub + "secret " + std::string(40, 'x') + "\n", "line 3: expected"},
           {pub + "private = x\n", "line 2: unknown name 'private'"},
           {pub + pub + sec, "line 2: 'public' is already set on line 1"},
           {pub + "secret = " + keys.secret_key.substr(2) + "\n", "line 2: the secret key is not"},
           {pub + sec.substr(0, sec.size() - 1) + " trailing\n", "line 2: only a '#' comment"},
           {"\n\n" + pub + "secret = " + other.secret_key + "\n",
            "line 4: the secret key does not belong"},
           {pub, "no 'secret = KEY' line"},
           {"", "no 'public = KEY' line"}}) {
    INFO(c.text);
    auto e = error_of([&] { parse_key_file(c.text, "x.key"); });
    CHECK(has(e, "key file x.key"));
    CHECK(has(e, c.want));
  }
  // Comments, blanks, CRLF and a trailing comment are fine.
  auto kp = parse_key_file(
      "# made today\r\n\r\n  " + pub + "secret = " + keys.secret_key + "   # mine\r\n", "x.key");
  CHECK(kp.secret_key == keys.secret_key);
}

TEST_CASE("authorized-keys files: one key a line, comments, errors with the line") {
  auto a = generate_keypair().public_key, b = generate_keypair().public_key;
  // No key starts with '#' (a first digit of 84 overflows 32 bits), so such
  // a line is a comment, a commented-out key too; '#' inside a key is fine.
  CHECK_FALSE(is_z85_key("#" + a.substr(1)));
  std::string inner = "0" + a.substr(1, 1) + "#" + a.substr(3);
  REQUIRE(is_z85_key(inner));
  auto keys = parse_authorized_keys("# cluster\n\n" + a + "  # node1\n" + b + "\n#" + b.substr(1) +
                                        "\n" + inner + "\t# with a hash\n" + a + "\n",
                                    "ak");
  CHECK(keys == std::vector<std::string>{a, b, inner});
  CHECK(parse_authorized_keys("", "ak").empty());

  struct Case {
    std::string text, want;
  };
  for (const auto& c :
       std::vector<Case>{{"# x\n" + a.substr(1) + "\n", "line 2: the public key is not"},
                         {a + " node1\n", "line 1: only a '#' comment"},
                         {"\npublic = " + a + "\n", "line 2: write the public key alone"},
                         {"secret = " + a + "\n", "line 1: a secret key does not belong here"}}) {
    INFO(c.text);
    auto e = error_of([&] { parse_authorized_keys(c.text, "ak"); });
    CHECK(has(e, "authorized-keys file ak"));
    CHECK(has(e, c.want));
  }
}

TEST_CASE("muster keygen output parses back") {
  std::string muster = test::program("MUSTER_TEST_MUSTER");
  SECTION("to stdout") {
    test::Process p({muster, "keygen"});
    auto out = p.read_all(10s);
    REQUIRE(p.wait(10s) == 0);
    auto kp = parse_key_file(out, "stdout");
    CHECK(public_key_of(kp.secret_key) == kp.public_key);
  }
  SECTION("to a file, with the authorized-keys line on stdout") {
    test::TempDir dir;
    std::string path = dir.path() + "/peer.key";
    test::Process p({muster, "keygen", "--out", path});
    auto line = p.read_all(10s);
    REQUIRE(p.wait(10s) == 0);
    auto kp = read_key_file(path);
    CHECK(parse_authorized_keys(line, "stdout") == std::vector<std::string>{kp.public_key});
    struct stat st {};
    REQUIRE(stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);

    test::Process again({muster, "keygen", "--out", path}, {}, true);
    auto said = again.read_all(10s);
    CHECK(again.wait(10s) == 1);
    CHECK(has(said, "already exists"));
    CHECK(read_key_file(path).secret_key == kp.secret_key);

    test::Process forced({muster, "keygen", "--out", path, "--force"});
    forced.read_all(10s);
    CHECK(forced.wait(10s) == 0);
    CHECK(read_key_file(path).secret_key != kp.secret_key);
  }
  SECTION("bad arguments exit 2") {
    for (auto args :
         std::vector<std::vector<std::string>>{{"--bogus"}, {"--out"}, {"--force"}, {"--out="}}) {
      args.insert(args.begin(), {muster, "keygen"});
      test::Process p(args, {}, true);
      auto said = p.read_all(10s);
      INFO(said);
      CHECK(p.wait(10s) == 2);
    }
    test::Process help({muster, "keygen", "--help"});
    CHECK(has(help.read_all(10s), "Usage: muster keygen"));
    CHECK(help.wait(10s) == 0);
  }
}
