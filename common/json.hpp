// JSON output (`muster status --json`) through nlohmann's ordered_json, which
// keeps keys in the order they are set.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace muster::json {

using Object = nlohmann::ordered_json;

// The compact form (no spaces), keys in insertion order. Bytes that are not
// UTF-8 become U+FFFD, so that the output is always valid JSON.
std::string dump(const Object& j);
// s as a JSON string, quotes included.
std::string quote(std::string_view s);

}  // namespace muster::json
