// Just enough JSON output for `muster status --json`: no parser, no DOM.
#pragma once

#include <string>
#include <string_view>

namespace muster::json {

std::string quote(std::string_view s);

}  // namespace muster::json
