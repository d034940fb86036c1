#include "cli/error_file.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace muster::cli {

namespace {

// The last `File "...", line N, in F` of a Python traceback: where it was
// raised.
std::string innermost_frame(const std::string& callstack) {
  std::istringstream in(callstack);
  std::string line, last;
  while (std::getline(in, line)) {
    auto at = line.find("File \"");
    if (at != std::string::npos) last = line.substr(at);
  }
  return last;
}

}  // namespace

RankError read_error_file(const std::string& path) {
  RankError e;
  std::ifstream in(path);
  if (!in) return e;
  try {
    auto doc = nlohmann::json::parse(in);
    const auto& m = doc.at("message");
    if (m.is_string()) {
      e.message = m.get<std::string>();
    } else {
      e.message = m.at("message").get<std::string>();
      if (m.contains("extraInfo")) {
        const auto& extra = m.at("extraInfo");
        e.callstack = extra.value("py_callstack", "");
        std::string ts = extra.value("timestamp", "0");
        e.time = static_cast<std::time_t>(std::stoll(ts));
      }
    }
  } catch (const std::exception&) {
    return RankError{};  // not torch's format: as if there were none
  }
  e.where = innermost_frame(e.callstack);
  e.found = true;
  return e;
}

std::string format_time(std::time_t t) {
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

}  // namespace muster::cli
