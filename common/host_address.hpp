// HOST:PORT as the daemons connect to it: by address, never by name. A
// daemon that looked a name up (getaddrinfo, in libzmq's one I/O thread or
// its loop) would hold every client's requests for as long as the lookup
// takes: 20 rendezvous naming hosts that do not resolve held root's pings
// for 2 s here, two of them unanswered. So the launcher, as the user, looks
// the name up, and the daemon takes only numeric addresses.
#pragma once

#include <string>

namespace muster {

// Whether e is ADDRESS:PORT with a numeric IPv4 address or a bracketed
// IPv6 one ("[::1]:29400") and a port 1..65535.
bool numeric_host_port(const std::string& e);

// e with its host looked up: IPv4 first, as libzmq connects by default
// (its ZMQ_IPV6 is off); a bracketed IPv6 literal as it is. Throws
// muster::Error (kInvalidArgument) naming e when the host has no address
// or e is not HOST:PORT.
std::string resolve_host_port(const std::string& e);

}  // namespace muster
