#include "peer/secure.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "muster/error.hpp"

namespace muster::daemon::peer {

namespace {

constexpr std::string_view kZ85Alphabet =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

// A draft option in libzmq 4.3 (set by number where zmq.h hides it): with it
// a CURVE server refuses every client while no ZAP handler is bound, where
// without it libzmq admits any client key.
#ifdef ZMQ_ZAP_ENFORCE_DOMAIN
constexpr int kZapEnforceDomain = ZMQ_ZAP_ENFORCE_DOMAIN;
#else
constexpr int kZapEnforceDomain = 93;
#endif

Error invalid(const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, what);
}

std::string_view trim(std::string_view s) {
  auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// Calls f(line_number, line) for each line of text.
template <class F>
void for_each_line(std::string_view text, F f) {
  int n = 0;
  while (!text.empty()) {
    auto nl = text.find('\n');
    f(++n, text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

// The first blank-separated word of s, and whether what follows it is empty
// or a '#' comment.
std::string_view first_word(std::string_view s, bool& rest_ok) {
  auto end = s.find_first_of(" \t");
  auto word = s.substr(0, end);
  auto rest = end == std::string_view::npos ? std::string_view{} : trim(s.substr(end));
  rest_ok = rest.empty() || rest.front() == '#';
  return word;
}

std::string key_problem(std::string_view key) {
  std::string why =
      "not a CURVE key in Z85 (40 characters of the Z85 alphabet, as `muster keygen` "
      "writes them)";
  if (key.empty())
    why += ": it is empty";
  else if (key.size() != 40)
    why += ": it has " + std::to_string(key.size()) + " characters";
  return why;
}

std::string read_text(const std::string& path, const char* kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw invalid(std::string("cannot read ") + kind + " '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw invalid(std::string("cannot read ") + kind + " '" + path + "'");
  return ss.str();
}

void set_key(zmq::socket_t& socket, int option, const std::string& binary) {
  if (zmq_setsockopt(socket.handle(), option, binary.data(), binary.size()) != 0)
    throw Error(ErrorCode::kInternal, std::string("cannot set a CURVE key on a peer socket: ") +
                                          zmq_strerror(zmq_errno()));
}

}  // namespace

bool is_z85_key(std::string_view key) {
  if (key.size() != 40) return false;
  for (size_t i = 0; i < key.size(); i += 5) {
    uint64_t value = 0;
    for (size_t j = i; j < i + 5; ++j) {
      auto digit = kZ85Alphabet.find(key[j]);
      if (digit == std::string_view::npos) return false;
      value = value * 85 + digit;
    }
    if (value > 0xffffffffu) return false;
  }
  return true;
}

void check_z85_key(std::string_view key, const std::string& what) {
  if (!is_z85_key(key)) throw invalid(what + ": " + key_problem(key));
}

std::string z85_to_binary(std::string_view key) {
  std::string z(key), out(32, '\0');
  if (!is_z85_key(key) || !zmq_z85_decode(reinterpret_cast<uint8_t*>(out.data()), z.c_str()))
    throw invalid("z85_to_binary: " + key_problem(key));
  return out;
}

std::string binary_to_z85(std::string_view key) {
  if (key.size() != 32) throw invalid("binary_to_z85: a CURVE key has 32 bytes");
  char out[41];
  zmq_z85_encode(out, reinterpret_cast<const uint8_t*>(key.data()), key.size());
  return std::string(out, 40);
}

std::string public_key_of(std::string_view secret_key) {
  check_z85_key(secret_key, "secret key");
  std::string secret(secret_key);
  char pub[41];
  if (zmq_curve_public(pub, secret.c_str()) != 0)
    throw invalid(
        "cannot derive a CURVE public key: libzmq has no CURVE support (built without "
        "libsodium)");
  return std::string(pub, 40);
}

KeyPair generate_keypair() {
  char pub[41], sec[41];
  for (;;) {
    if (zmq_curve_keypair(pub, sec) != 0)
      throw invalid(
          "cannot make a CURVE key pair: libzmq has no CURVE support (built without "
          "libsodium)");
    KeyPair kp{std::string(pub, 40), std::string(sec, 40)};
    if (kp.public_key.find('#') == std::string::npos &&
        kp.secret_key.find('#') == std::string::npos)
      return kp;
  }
}

KeyPair parse_key_file(std::string_view text, const std::string& name) {
  KeyPair kp;
  int pub_line = 0, sec_line = 0;
  for_each_line(text, [&](int n, std::string_view raw) {
    std::string where = "key file " + name + ", line " + std::to_string(n) + ": ";
    auto line = trim(raw);
    if (line.empty() || line.front() == '#') return;
    auto eq = line.find('=');
    std::string key(trim(line.substr(0, eq)));
    // Z85 has '=' in it: "secret KEY" may hold one too.
    if (eq == std::string_view::npos || key.find_first_of(" \t") != std::string::npos)
      throw invalid(where + "expected 'public = KEY' or 'secret = KEY'");
    bool rest_ok = true;
    auto value = first_word(trim(line.substr(eq + 1)), rest_ok);
    int* seen = key == "public" ? &pub_line : key == "secret" ? &sec_line : nullptr;
    if (!seen)
      throw invalid(where + "unknown name '" + key + "' (a key file has 'public' and 'secret')");
    if (*seen)
      throw invalid(where + "'" + key + "' is already set on line " + std::to_string(*seen));
    if (!rest_ok) throw invalid(where + "only a '#' comment may follow the " + key + " key");
    if (!is_z85_key(value)) throw invalid(where + "the " + key + " key is " + key_problem(value));
    *seen = n;
    (key == "public" ? kp.public_key : kp.secret_key) = std::string(value);
  });
  if (!pub_line) throw invalid("key file " + name + ": no 'public = KEY' line");
  if (!sec_line) throw invalid("key file " + name + ": no 'secret = KEY' line");
  if (public_key_of(kp.secret_key) != kp.public_key)
    throw invalid("key file " + name + ", line " + std::to_string(sec_line) +
                  ": the secret key does not belong to the public key on line " +
                  std::to_string(pub_line) + " (use the pair `muster keygen` made, unchanged)");
  return kp;
}

KeyPair read_key_file(const std::string& path) {
  return parse_key_file(read_text(path, "key file"), path);
}

std::string format_key_file(const KeyPair& keys) {
  return "# muster peer key pair (CURVE), made by `muster keygen`. Keep it secret:\n"
         "# musterd reads it through `peer-key-file = THIS FILE`. The public key goes\n"
         "# into the peer-authorized-keys file of every daemon that should accept\n"
         "# this one (a cluster may also share one pair: a daemon always accepts its\n"
         "# own public key).\n"
         "public = " +
         keys.public_key + "\nsecret = " + keys.secret_key + "\n";
}

void write_key_file(const std::string& path, const KeyPair& keys, bool overwrite) {
  std::string text = format_key_file(keys);
  auto fail = [&](const std::string& what, int err) {
    return Error(ErrorCode::kInternal, what + " '" + path + "': " + std::strerror(err));
  };
  std::string tmp;
  int fd;
  if (overwrite) {
    // A temporary file beside it, renamed over it: never half a key file.
    tmp = path + ".XXXXXX";
    fd = ::mkostemp(tmp.data(), O_CLOEXEC);
    if (fd < 0) throw fail("cannot write key file", errno);
  } else {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno == EEXIST)
      throw Error(ErrorCode::kConflict, "key file '" + path + "' already exists");
    if (fd < 0) throw fail("cannot create key file", errno);
  }
  int err = 0;
  if (::fchmod(fd, 0600) != 0) err = errno;
  for (size_t done = 0; !err && done < text.size();) {
    ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0)
      err = errno;
    else
      done += static_cast<size_t>(w);
  }
  if (!err && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && overwrite && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(overwrite ? tmp.c_str() : path.c_str());
    throw fail("cannot write key file", err);
  }
}

std::vector<std::string> parse_authorized_keys(std::string_view text, const std::string& name) {
  std::vector<std::string> keys;
  for_each_line(text, [&](int n, std::string_view raw) {
    std::string where = "authorized-keys file " + name + ", line " + std::to_string(n) + ": ";
    auto line = trim(raw);
    if (line.empty()) return;
    bool rest_ok = true;
    auto word = first_word(line, rest_ok);
    if (is_z85_key(word)) {
      if (!rest_ok) throw invalid(where + "only a '#' comment may follow the key");
      std::string key(word);
      bool dup = false;
      for (const auto& k : keys) dup = dup || k == key;
      if (!dup) keys.push_back(key);
      return;
    }
    if (line.front() == '#') return;
    auto eq = line.find('=');
    if (eq != std::string_view::npos) {
      auto lhs = trim(line.substr(0, eq));
      if (lhs == "secret")
        throw invalid(where + "a secret key does not belong here: this file lists public keys");
      if (lhs == "public") throw invalid(where + "write the public key alone, without 'public ='");
    }
    throw invalid(where + "the public key is " + key_problem(word));
  });
  return keys;
}

std::vector<std::string> read_authorized_keys(const std::string& path) {
  return parse_authorized_keys(read_text(path, "authorized-keys file"), path);
}

Security Security::from_settings(const PeerSettings& cfg) {
  Security s;
  bool any_key = !cfg.own.public_key.empty() || !cfg.own.secret_key.empty() ||
                 !cfg.authorized_keys.empty() || !cfg.server_key.empty();
  if (cfg.plain) {
    if (any_key)
      throw invalid(
          "peer-plain (unencrypted peering) contradicts the CURVE key settings "
          "(peer-key-file, peer-authorized-keys, peer-server-key): keep one or the "
          "other");
    s.plain = true;
    return s;
  }
  if (!zmq_has("curve"))
    throw invalid(
        "peering needs CURVE, and this libzmq has none (built without libsodium); "
        "set peer-plain = true for unencrypted peering on a trusted network");
  if (cfg.own.public_key.empty() && cfg.own.secret_key.empty())
    throw invalid(
        "peering needs a CURVE key pair: run `muster keygen --out FILE` and set "
        "peer-key-file = FILE (one pair shared by the cluster is the simple setup), or "
        "set peer-plain = true for unencrypted peering on a trusted network");
  if (cfg.own.public_key.empty())
    throw invalid("a peer secret key without its public key: set peer-key-file");
  if (cfg.own.secret_key.empty())
    throw invalid("a peer public key without its secret key: set peer-key-file");
  check_z85_key(cfg.own.public_key, "the peer public key");
  check_z85_key(cfg.own.secret_key, "the peer secret key");
  if (public_key_of(cfg.own.secret_key) != cfg.own.public_key)
    throw invalid(
        "the peer secret key does not belong to the peer public key (use the pair "
        "`muster keygen` made, unchanged)");
  s.public_key = cfg.own.public_key;
  s.secret_key = cfg.own.secret_key;
  s.authorized.push_back(s.public_key);
  for (size_t i = 0; i < cfg.authorized_keys.size(); ++i) {
    const auto& k = cfg.authorized_keys[i];
    check_z85_key(k, "peer-authorized-keys, key " + std::to_string(i + 1));
    if (!s.authorizes(k)) s.authorized.push_back(k);
  }
  if (!cfg.server_key.empty()) check_z85_key(cfg.server_key, "peer-server-key");
  s.server_key = cfg.server_key.empty() ? s.public_key : cfg.server_key;
  return s;
}

bool Security::authorizes(std::string_view key) const {
  std::string z85 = key.size() == 32 ? binary_to_z85(key) : std::string(key);
  for (const auto& k : authorized)
    if (k == z85) return true;
  return false;
}

void make_server(zmq::socket_t& socket, const Security& sec) {
  if (sec.plain) return;
  socket.set(zmq::sockopt::curve_server, 1);
  set_key(socket, ZMQ_CURVE_SECRETKEY, z85_to_binary(sec.secret_key));
  socket.set(zmq::sockopt::zap_domain, kZapDomain);
  int one = 1;
  // Unknown to a libzmq without the draft API: then the handler must exist.
  (void)zmq_setsockopt(socket.handle(), kZapEnforceDomain, &one, sizeof one);
}

void make_client(zmq::socket_t& socket, const Security& sec, std::string_view server_key_z85) {
  if (sec.plain) return;
  std::string server(server_key_z85.empty() ? std::string_view(sec.server_key) : server_key_z85);
  check_z85_key(server, "the peer server key");
  set_key(socket, ZMQ_CURVE_SERVERKEY, z85_to_binary(server));
  set_key(socket, ZMQ_CURVE_PUBLICKEY, z85_to_binary(sec.public_key));
  set_key(socket, ZMQ_CURVE_SECRETKEY, z85_to_binary(sec.secret_key));
}

}  // namespace muster::daemon::peer
