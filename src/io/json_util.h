// JSON parsing shared by the io readers: nlohmann::json with duplicate-key rejection.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ss {

// Parses `text` as JSON. Throws ss::Error "<source>: malformed JSON: ..." on a syntax error and
// "<source>: duplicate key '<key>'" when an object repeats a key: nlohmann (like most parsers)
// would silently keep the last value, which lets two readers of one file disagree about it.
nlohmann::json ParseJsonStrict(std::string_view text, const std::string& source,
                               const std::string& what = "JSON");

}  // namespace ss
