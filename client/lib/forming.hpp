// A forming rendezvous round as the wire carries it, for the public API.
#pragma once

#include "muster/status.hpp"
#include "protocol/messages.hpp"

namespace muster::detail {

Forming from_wire(const proto::Forming& f);
WaitInfo from_wire(const proto::WaitStatus& w);

}  // namespace muster::detail
