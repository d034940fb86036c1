// Security between daemons: CURVE (libzmq with libsodium) with key pairs from
// the config, a ZAP handler that admits only authorised daemons, and the key
// files `muster keygen` writes. Unencrypted peering only with peer_plain.
//
// Order on the listening side: Security::from_settings, then a ZapHandler in
// the server's zmq::context_t, then make_server on the socket, then bind.
// make_server also sets ZMQ_ZAP_ENFORCE_DOMAIN where libzmq knows it, so a
// CURVE socket without a handler refuses everyone instead of admitting all.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "peer/settings.hpp"

namespace muster::daemon::peer {

// The ZAP domain of peer sockets, and where libzmq looks for the handler.
inline constexpr const char* kZapDomain = "muster-peer";
inline constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

// Z85 keys. A key is 40 characters of the Z85 alphabet that decode to 32
// bytes. check_z85_key throws Error(kInvalidArgument) naming `what`.
bool is_z85_key(std::string_view key);
void check_z85_key(std::string_view key, const std::string& what);
std::string z85_to_binary(std::string_view key);  // 32 bytes; key must be valid
std::string binary_to_z85(std::string_view key);  // key: 32 bytes
// The public key of a secret key (zmq_curve_public), both Z85.
std::string public_key_of(std::string_view secret_key);

// A fresh pair (zmq_curve_keypair). Neither key contains '#', so both can go
// anywhere '#' starts a comment. Throws Error when libzmq lacks CURVE.
KeyPair generate_keypair();

// Key file: `public = Z85` and `secret = Z85` lines; blank lines and lines
// starting with '#' are comments. The secret must belong to the public key.
// Errors (Error, kInvalidArgument) name the file and the line.
KeyPair parse_key_file(std::string_view text, const std::string& name);
KeyPair read_key_file(const std::string& path);
// The text of a key file, with a comment saying what it is.
std::string format_key_file(const KeyPair& keys);
// Writes format_key_file(keys) with mode 0600. An existing file is an error
// (kConflict) unless overwrite, which replaces it atomically.
void write_key_file(const std::string& path, const KeyPair& keys, bool overwrite);

// Authorised-keys file: one Z85 public key a line, optionally followed by
// blanks and a '#' comment; blank lines and lines starting with '#' are
// comments (no Z85 key starts with '#', though one may contain it). Errors
// name the file and the line.
std::vector<std::string> parse_authorized_keys(std::string_view text, const std::string& name);
std::vector<std::string> read_authorized_keys(const std::string& path);

// The peering settings, checked.
struct Security {
  bool plain = false;      // unencrypted (NULL mechanism); no keys
  std::string public_key;  // Z85, ours
  std::string secret_key;  // Z85, ours
  // Z85 public key make_client expects of the daemon it connects to.
  std::string server_key;
  // Z85 public keys admitted by ZapHandler; ours is always the first.
  std::vector<std::string> authorized;

  // Throws Error(kInvalidArgument) with a sentence naming the setting: bad
  // or mismatched keys, keys together with peer_plain, neither keys nor
  // peer_plain (run `muster keygen`), or a libzmq without CURVE.
  static Security from_settings(const PeerSettings& cfg);
  // Whether this (binary, 32 bytes, or Z85) public key may connect.
  bool authorizes(std::string_view key) const;
};

// CURVE server: curve_server, our secret key, the ZAP domain. Call before
// bind. Nothing when plain.
void make_server(zmq::socket_t& socket, const Security& sec);
// CURVE client: our key pair and the server's key (server_key_z85, else
// sec.server_key). Call before connect. Nothing when plain.
void make_client(zmq::socket_t& socket, const Security& sec, std::string_view server_key_z85 = {});

}  // namespace muster::daemon::peer
