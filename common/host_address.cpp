#include "host_address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>

#include "muster/error.hpp"

namespace muster {

namespace {

// Splits HOST:PORT; false when there is no port 1..65535.
bool split(const std::string& e, std::string& host, std::string& port) {
  auto colon = e.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= e.size() || e.size() - colon > 6)
    return false;
  port = e.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos) return false;
  int p = std::stoi(port);
  if (p <= 0 || p > 65535) return false;
  host = e.substr(0, colon);
  return true;
}

}  // namespace

bool numeric_host_port(const std::string& e) {
  std::string host, port;
  if (!split(e, host, port)) return false;
  unsigned char buf[sizeof(in6_addr)];
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    return ::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), buf) == 1;
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1;
}

std::string resolve_host_port(const std::string& e) {
  std::string host, port;
  if (!split(e, host, port))
    throw Error(ErrorCode::kInvalidArgument, "'" + e + "' is not HOST:PORT with a port 1..65535");
  if (numeric_host_port(e)) return e;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || !found)
    throw Error(ErrorCode::kInvalidArgument,
                "cannot look up the host of '" + e + "': " + ::gai_strerror(rc));
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text,
              sizeof text);
  ::freeaddrinfo(found);
  return std::string(text) + ":" + port;
}

}  // namespace muster
