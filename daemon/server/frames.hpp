// Frames out of the daemon: replies on a ROUTER and requests on a DEALER.
#pragma once

#include <string>
#include <zmq.hpp>

namespace muster::daemon {

struct Outgoing;

// A frame as a message. A large one (a broadcast's chunk) is handed over,
// not copied: ZeroMQ frees it once sent (or dropped), on its I/O thread.
zmq::message_t take_frame(std::string& frame);

// Sends o's frame to o.to.routing_id on a ROUTER, never blocking: a
// vanished peer is not an error for the daemon (ROUTER drops the reply).
void send_reply(zmq::socket_t& router, Outgoing& o);

}  // namespace muster::daemon
