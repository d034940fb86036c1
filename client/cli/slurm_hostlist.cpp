#include "cli/slurm_hostlist.hpp"

#include <cctype>
#include <stdexcept>

#include "split.hpp"

namespace muster::cli {

namespace {

[[noreturn]] void bad(const std::string& list, const std::string& why) {
  throw std::invalid_argument("hostlist '" + list + "': " + why);
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// The numbers of a bracket's inside ("01-04,07"), as text with the lower
// bound's width (Slurm pads every number of a range to it).
std::vector<std::string> expand_ranges(const std::string& list, const std::string& inside) {
  std::vector<std::string> out;
  for (const auto& part : split(inside)) {
    auto dash = part.find('-');
    std::string lo = part.substr(0, dash);
    std::string hi = dash == std::string::npos ? lo : part.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 9 || hi.size() > 9)
      bad(list, "'[" + inside + "]' must hold numbers and ranges like 01-04,07");
    unsigned long a = std::stoul(lo), b = std::stoul(hi);
    if (b < a) bad(list, "the range " + part + " runs backwards");
    if (b - a >= kMaxHosts || out.size() + (b - a) >= kMaxHosts)
      bad(list, "expands to more than " + std::to_string(kMaxHosts) + " names");
    for (unsigned long n = a; n <= b; ++n) {
      std::string s = std::to_string(n);
      if (s.size() < lo.size()) s.insert(0, lo.size() - s.size(), '0');
      out.push_back(s);
    }
  }
  return out;
}

// One name with any number of bracket groups, each multiplying the names.
void expand_name(const std::string& list, const std::string& name,
                 std::vector<std::string>& hosts) {
  if (name.empty()) bad(list, "an empty host name");
  std::vector<std::string> names{""};
  size_t i = 0;
  while (i < name.size()) {
    size_t open = name.find('[', i);
    std::string text = name.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (text.find(']') != std::string::npos) bad(list, "a ']' without its '['");
    for (auto& n : names) n += text;
    if (open == std::string::npos) break;
    size_t close = name.find(']', open);
    if (close == std::string::npos) bad(list, "a '[' without its ']'");
    std::string inside = name.substr(open + 1, close - open - 1);
    if (inside.find('[') != std::string::npos) bad(list, "brackets cannot nest");
    auto numbers = expand_ranges(list, inside);
    if (names.size() * numbers.size() + hosts.size() > kMaxHosts)
      bad(list, "expands to more than " + std::to_string(kMaxHosts) + " names");
    std::vector<std::string> more;
    for (const auto& n : names)
      for (const auto& num : numbers) more.push_back(n + num);
    names.swap(more);
    i = close + 1;
  }
  hosts.insert(hosts.end(), names.begin(), names.end());
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> hosts;
  // Names are separated by commas outside brackets (and by blanks, which
  // Slurm accepts too).
  std::string name;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) bad(list, "a ']' without its '['");
    if (depth == 0 && (c == ',' || c == ' ')) {
      expand_name(list, name, hosts);
      name.clear();
      continue;
    }
    name += c;
  }
  if (depth != 0) bad(list, "a '[' without its ']'");
  expand_name(list, name, hosts);
  return hosts;
}

}  // namespace muster::cli
