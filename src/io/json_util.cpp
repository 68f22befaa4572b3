#include "io/json_util.h"

#include <limits>
#include <set>
#include <vector>

#include "common/error.h"

namespace ss {

using nlohmann::json;

nlohmann::json ParseJsonStrict(std::string_view text, const std::string& source,
                               const std::string& what) {
  // One set of seen keys per open object; the parser reports keys in document order.
  std::vector<std::set<std::string>> open_objects;
  auto on_event = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!open_objects.empty() && !open_objects.back().insert(key).second)
          Fail("{}: {} has duplicate key '{}'", source, what, key);
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), on_event);
  } catch (const json::exception& e) {
    Fail("{}: malformed {}: {}", source, what, e.what());
  }
}

int64_t JsonInteger(const nlohmann::json& j, const char* key, int64_t lo, int64_t hi,
                    const std::string& source) {
  if (!j.is_object() || !j.contains(key)) Fail("{}: missing '{}'", source, key);
  const nlohmann::json& v = j[key];
  const bool too_large =
      v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (!v.is_number_integer() || too_large || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    Fail("{}: '{}' must be an integer in [{}, {}], got {}", source, key, lo, hi,
         v.dump().substr(0, 40));
  return v.get<int64_t>();
}

}  // namespace ss
