#include "server/peer_links.hpp"

#include <utility>

#include "log.hpp"
#include "peer/secure.hpp"
#include "protocol/limits.hpp"
#include "server/frames.hpp"

namespace muster::daemon {

PeerLinks::PeerLinks(zmq::context_t& ctx, event::Loop& loop, int order,
                     const peer::Security* security, OnFrame on_frame)
    : ctx_(ctx), loop_(loop), order_(order), security_(security), on_frame_(std::move(on_frame)) {}

void PeerLinks::send(const std::string& name, std::string& frame) {
  auto it = links_.find(name);
  zmq::socket_t* sock = it != links_.end() ? &it->second.sock : connect(name);
  if (sock) sock->send(take_frame(frame), zmq::send_flags::dontwait);
}

zmq::socket_t* PeerLinks::connect(const std::string& name) {
  if (!security_) return nullptr;  // rendezvous refused these already
  zmq::socket_t s(ctx_, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits::kMaxFrameBytes + 4096));
  peer::make_client(s, *security_);
  try {
    s.connect("tcp://" + name);
  } catch (const zmq::error_t& e) {
    log::warning(log::peer(name), "cannot connect to coordinator " + name + ": " + e.what());
    return nullptr;
  }
  return &links_.try_emplace(name, *this, name, std::move(s)).first->second.sock;
}

PeerLinks::Link::Link(PeerLinks& owner, std::string name_, zmq::socket_t s)
    : name(std::move(name_)),
      sock(std::move(s)),
      event(owner.loop_, owner.order_, [this, &owner] { owner.read(*this); }) {
  event.schedule_socket(sock.handle());
}

void PeerLinks::read(Link& link) {
  zmq::socket_t& sock = link.sock;
  for (int n = 0; n < 1024; ++n) {
    zmq::message_t msg;
    if (!sock.recv(msg, zmq::recv_flags::dontwait)) break;
    while (msg.more()) {  // a DEALER reply is one frame; drop anything else
      zmq::message_t rest;
      (void)sock.recv(rest);
    }
    on_frame_(link.name, msg);
  }
}

void PeerLinks::prune(const std::function<bool(const std::string&)>& keep) {
  std::erase_if(links_, [&](const auto& kv) { return !keep(kv.first); });
}

}  // namespace muster::daemon
