// The store requests beyond the first six (set, get, add, compare_set,
// delete, wait): torch's num_keys and its newer Store API.
#include "muster/client.hpp"
#include "protocol/store_messages.hpp"
#include "session.hpp"

namespace muster {

namespace {
std::vector<std::string> values_of(const proto::Values& v, bool keys) {
  std::vector<std::string> out;
  out.reserve(v.items.size());
  for (const auto& kv : v.items) out.push_back(keys ? kv.key : kv.value);
  return out;
}
}  // namespace

int64_t Client::num_keys(const std::string& prefix) {
  return session_
      ->call<proto::Int>(proto::StoreNumKeys{session_->job(), prefix, session_->generation()})
      .value;
}

void Client::append(const std::string& key, const std::string& value) {
  session_->call<proto::Ok>(
      proto::StoreAppend{session_->job(), key, value, session_->generation()});
}

void Client::multi_set(const std::vector<std::string>& keys,
                       const std::vector<std::string>& values) {
  if (keys.size() != values.size())
    throw Error(ErrorCode::kInvalidArgument, "multi_set: " + std::to_string(keys.size()) +
                                                 " keys but " + std::to_string(values.size()) +
                                                 " values");
  proto::StoreMultiSet m{session_->job(), {}, session_->generation()};
  for (size_t i = 0; i < keys.size(); ++i) m.items.push_back({keys[i], values[i]});
  session_->call<proto::Ok>(m);
}

std::vector<std::string> Client::multi_get(const std::vector<std::string>& keys,
                                           std::optional<std::chrono::milliseconds> timeout) {
  auto ms = session_->wait_ms(timeout);
  auto v = session_->call<proto::Values>(
      proto::StoreMultiGet{session_->job(), keys, ms, session_->generation()},
      std::chrono::milliseconds(ms));
  return values_of(v, false);
}

void Client::queue_push(const std::string& key, const std::string& value) {
  session_->call<proto::Ok>(
      proto::StoreQueuePush{session_->job(), key, value, session_->generation()});
}

std::string Client::queue_pop(const std::string& key,
                              std::optional<std::chrono::milliseconds> timeout) {
  auto ms = session_->wait_ms(timeout);
  return session_
      ->call<proto::Value>(proto::StoreQueuePop{session_->job(), key, ms, session_->generation()},
                           std::chrono::milliseconds(ms))
      .value;
}

int64_t Client::queue_len(const std::string& key) {
  return session_
      ->call<proto::Int>(proto::StoreQueueLen{session_->job(), key, session_->generation()})
      .value;
}

std::vector<std::string> Client::list_keys(const std::string& prefix) {
  auto v = session_->call<proto::Values>(
      proto::StoreListKeys{session_->job(), prefix, session_->generation()});
  return values_of(v, true);
}

Client Client::clone() const {
  Client c(session_->options());
  if (session_->joined()) c.session_->joined(session_->rank());
  return c;
}

}  // namespace muster
