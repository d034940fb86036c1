// The Store's answers as reply frames: where the protocol meets the store.
#pragma once

#include <string>
#include <vector>

#include "core/reply.hpp"
#include "core/store.hpp"
#include "protocol/envelope.hpp"
#include "protocol/messages.hpp"
#include "protocol/store_messages.hpp"

namespace muster::daemon {

// A reply to `to`, encoded.
template <class M>
void send_reply(std::vector<Outgoing>& out, const ReplyTo& to, const M& m) {
  out.push_back({to, proto::encode(to.request_id, m)});
}
inline void send_error(std::vector<Outgoing>& out, const ReplyTo& to, ErrorCode code,
                       const std::string& why) {
  out.push_back(
      {to, proto::encode_error(to.request_id, code, why), {}, static_cast<uint16_t>(code)});
}

class OutAnswers final : public Answers {
 public:
  explicit OutAnswers(std::vector<Outgoing>& out) : out_(out) {}
  void ok(const ReplyTo& to) override { send_reply(out_, to, proto::Ok{}); }
  void value(const ReplyTo& to, const std::string& v) override {
    send_reply(out_, to, proto::Value{v});
  }
  void values(const ReplyTo& to, const std::vector<std::string>& v) override {
    proto::Values m;
    for (const auto& x : v) m.items.push_back({"", x});
    send_reply(out_, to, m);
  }
  void error(const ReplyTo& to, ErrorCode code, const std::string& why) override {
    send_error(out_, to, code, why);
  }

 private:
  std::vector<Outgoing>& out_;
};

}  // namespace muster::daemon
