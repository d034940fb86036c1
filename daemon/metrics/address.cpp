#include "metrics/address.hpp"

#include <arpa/inet.h>

#include <cstring>
#include <stdexcept>

namespace muster::daemon::metrics {

ListenAddress parse_listen_address(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return std::runtime_error(
        "--metrics-listen '" + text + "': " + why +
        " (expected ADDR[:PORT], e.g. 127.0.0.1:" + std::to_string(kDefaultPort) + " or [::1])");
  };
  if (text.empty()) throw bad("no address");
  // No port (127.0.0.1, [::1]): muster's own.
  auto colon = text.rfind(':');
  bool bare = colon == std::string::npos || text.back() == ']';
  if (colon == 0) throw bad("no address");
  std::string host = bare ? text : text.substr(0, colon);
  std::string port = bare ? std::to_string(kDefaultPort) : text.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    throw bad("the port is not a number");
  unsigned long p = std::stoul(port);
  if (p > 65535) throw bad("the port is over 65535");
  ListenAddress a;
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') throw bad("unbalanced brackets");
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.addr);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(p));
    if (::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &v6->sin6_addr) != 1)
      throw bad("not an IPv6 address");
    a.len = sizeof(sockaddr_in6);
    a.ipv6 = true;
    return a;
  }
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.addr);
  v4->sin_family = AF_INET;
  v4->sin_port = htons(static_cast<uint16_t>(p));
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) != 1)
    throw bad("not an IPv4 address (IPv6 goes in brackets)");
  a.len = sizeof(sockaddr_in);
  return a;
}

}  // namespace muster::daemon::metrics
