#include "io/json_util.h"

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
      case json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!open_objects.empty() && !open_objects.back().insert(key).second)
          Fail("{}: {} has duplicate key '{}'", source, what, key);
        break;
      }
      default: break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), on_event);
  } catch (const json::exception& e) {
    Fail("{}: malformed {}: {}", source, what, e.what());
  }
}

}  // namespace ss
