// The items of a separated list on a command line or in a variable
// ("0,1,4", "01-04,07", "SIGTERM,SIGINT"), for the parsers that check
// each item themselves.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace muster {

// Every item between separators, empty ones included, so that a parser
// can refuse them: "a,,b" -> {"a", "", "b"}, "" -> {""}.
inline std::vector<std::string> split(std::string_view list, char sep = ',') {
  std::vector<std::string> items;
  size_t start = 0;
  for (;;) {
    size_t end = list.find(sep, start);
    items.emplace_back(list.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return items;
    start = end + 1;
  }
}

}  // namespace muster
