// The sentence for an open wait, one wording for the daemon's stuck lines
// and `muster status`.
#pragma once

#include <string>

#include "protocol/messages.hpp"

namespace muster {

// "barrier 'epoch-3': 7/8, waiting for rank 5 (node 2, pid 4242) for 41 s";
// "rank 3 (node 0, pid 77) waits for key 'k' for 12 s".
std::string describe(const proto::WaitStatus& w);

}  // namespace muster
