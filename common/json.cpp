#include "json.hpp"

namespace muster::json {

std::string dump(const Object& j) {
  return j.dump(-1, ' ', false, Object::error_handler_t::replace);
}

std::string quote(std::string_view s) {
  return dump(Object(std::string(s)));
}

}  // namespace muster::json
