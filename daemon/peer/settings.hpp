// The peering settings as configured (musterd.conf, musterd's flags, an
// embedded daemon's): what Security::from_settings (secure.hpp) checks.
// Apart from secure.hpp so that the server's Config holds them without
// the peer layer reaching up into the server's.
#pragma once

#include <string>
#include <vector>

namespace muster::daemon::peer {

// A CURVE key pair, both keys Z85 (40 characters).
struct KeyPair {
  std::string public_key;
  std::string secret_key;
};

struct PeerSettings {
  // Unencrypted peering, only when set explicitly; otherwise a key pair
  // is required to peer at all.
  bool plain = false;
  KeyPair own;  // ours (peer-key-file)
  // Public keys (Z85) of daemons allowed to connect to us; our own is
  // always allowed (one key pair shared by a cluster is the simple setup).
  std::vector<std::string> authorized_keys;
  // The public key we expect of the daemons we connect to; empty = ours.
  std::string server_key;
};

}  // namespace muster::daemon::peer
