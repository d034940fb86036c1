// Frames out of the daemon: replies on a ROUTER and requests on a DEALER.
#pragma once

#include <string>
#include <zmq.hpp>

namespace muster::daemon {

struct Outgoing;

// A frame as a message. A large one (a broadcast's chunk) is handed over,
// not copied: ZeroMQ frees it once sent (or dropped), on its I/O thread.
zmq::message_t take_frame(std::string& frame);

enum class SendResult { kSent, kFull, kGone };

// Sends o's frame to o.to.routing_id on a ROUTER, never blocking. kFull: the
// connection's queue is at its ZMQ_SNDHWM (a client that does not read);
// kGone: no such connection (ZMQ_ROUTER_MANDATORY). Neither is an error
// for the daemon: the reply is dropped, and the client, should it read
// again, sends its request again.
SendResult send_reply(zmq::socket_t& router, Outgoing& o);

}  // namespace muster::daemon
