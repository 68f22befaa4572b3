// JSON parsing shared by the io readers: nlohmann::json with duplicate-key rejection.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace ss {

// Parses `text` as JSON. Throws ss::Error "<source>: malformed JSON: ..." on a syntax error and
// "<source>: duplicate key '<key>'" when an object repeats a key: nlohmann (like most parsers)
// would silently keep the last value, which lets two readers of one file disagree about it.
nlohmann::json ParseJsonStrict(std::string_view text, const std::string& source,
                               const std::string& what = "JSON");

// The integer at j[key], which must be a JSON integer (not 2.5, not 1e300) in [lo, hi]. Throws
// ss::Error "<source>: '<key>' ..." otherwise, or when the key is missing. (nlohmann's get<int>()
// converts a float silently, and out of range with undefined behaviour: found by fuzzing.)
int64_t JsonInteger(const nlohmann::json& j, const char* key, int64_t lo, int64_t hi,
                    const std::string& source);

}  // namespace ss
