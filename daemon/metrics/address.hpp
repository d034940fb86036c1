// --metrics-listen's ADDR[:PORT]: an IPv4 address, or an IPv6 one in
// brackets, and a port (0 = any free one; kDefaultPort when left out). Numeric only: the listener
// binds exactly the address given, never a name that resolves elsewhere.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

namespace muster::daemon::metrics {

// The port when none is given: muster's own, outside the 9100-9999 range of
// Prometheus exporters (all taken) and beside its peer port 29400.
inline constexpr int kDefaultPort = 29401;

struct ListenAddress {
  sockaddr_storage addr{};
  socklen_t len = 0;
  bool ipv6 = false;
};

// Throws std::runtime_error with a sentence that names the option.
ListenAddress parse_listen_address(const std::string& text);

}  // namespace muster::daemon::metrics
