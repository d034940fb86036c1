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
  if (id.size() > limits::kMaxJobIdBytes)
    return "job id is " + std::to_string(id.size()) + " bytes long, over the limit of " +
           std::to_string(limits::kMaxJobIdBytes);
  for (unsigned char c : id)
    if (!job_id_char(c))
      return "job id '" + std::string(id) + "' may hold only letters, digits and - _ . : @ +";
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
