#include "job_id.hpp"

#include <sys/random.h>

#include <cerrno>
#include <system_error>

#include "protocol/limits.hpp"

namespace muster {

namespace {
bool job_id_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == ':' || c == '@' || c == '+';
}
}  // namespace

std::string job_id_problem(std::string_view id) {
  if (id.empty()) return "job id must not be empty";
  if (id.size() > limits::kMaxJobNameBytes)
    return "job id is " + std::to_string(id.size()) + " bytes long, over the limit of " +
           std::to_string(limits::kMaxJobNameBytes);
  for (unsigned char c : id)
    if (!job_id_char(c))
      return "job id '" + std::string(id) + "' may hold only letters, digits and - _ . : @ +";
  return "";
}

std::string job_key(int64_t owner_uid, std::string_view name) {
  if (owner_uid <= 0) return std::string(name);
  return std::string(name) + "~" + std::to_string(owner_uid);
}

std::string_view job_name(std::string_view key) {
  return key.substr(0, key.find('~'));
}

int64_t job_key_owner(std::string_view key) {
  auto tilde = key.find('~');
  if (tilde == std::string_view::npos) return 0;
  int64_t uid = 0;
  for (char c : key.substr(tilde + 1)) uid = uid * 10 + (c - '0');
  return uid;
}

std::string job_key_problem(std::string_view key) {
  auto tilde = key.find('~');
  if (auto why = job_id_problem(key.substr(0, tilde)); !why.empty()) return why;
  if (tilde == std::string_view::npos) return "";
  auto uid = key.substr(tilde + 1);
  bool digits = !uid.empty() && uid.size() <= 10 && uid[0] != '0';
  for (char c : uid) digits = digits && c >= '0' && c <= '9';
  if (!digits || std::stoll(std::string(uid)) > 0xffffffffLL)
    return "job key '" + std::string(key) + "' has no uid after its '~'";
  return "";
}

std::string random_job_id() {
  unsigned char bits[12];
  size_t got = 0;
  while (got < sizeof bits) {
    ssize_t n = ::getrandom(bits + got, sizeof bits - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::system_error(errno, std::generic_category(), "getrandom");
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string id = "job-";
  for (unsigned char b : bits) {
    id.push_back(kHex[b >> 4]);
    id.push_back(kHex[b & 15]);
  }
  return id;
}

}  // namespace muster
