#include "serve/request_body.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace ss::serve {
namespace {

using json = nlohmann::json;

std::string Shown(std::string_view s) { return PrintableExcerpt(s, 40); }

// The request's JSON object, whose keys must all be among `known`: a key the endpoint does not
// read (a misspelling, a CLI flag's name) would otherwise be silently ignored.
json Parse(std::string_view text, std::initializer_list<std::string_view> known) {
  json body;
  try {
    body = json::parse(text);  // rejects invalid UTF-8 in strings
  } catch (const json::exception& e) {
    Fail("malformed request: {}", e.what());
  }
  if (!body.is_object()) Fail("expected a JSON object");
  for (const auto& [key, value] : body.items())
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string names;
      for (std::string_view k : known) names += (names.empty() ? "" : ", ") + std::string(k);
      Fail("unknown key '{}' (this request takes {})", Shown(key), names);
    }
  return body;
}

bool Given(const json& body, const char* key) { return body.contains(key) && !body[key].is_null(); }

int IntField(const json& body, const char* key, int fallback, int lo, int hi) {
  if (!Given(body, key)) return fallback;
  const json& v = body[key];
  bool in_range = v.is_number_integer();
  if (in_range && v.is_number_unsigned())  // beyond int64: get<int64_t> would wrap
    in_range = hi >= 0 && v.get<uint64_t>() <= static_cast<uint64_t>(hi) &&
               static_cast<int64_t>(v.get<uint64_t>()) >= lo;
  else if (in_range)
    in_range = v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!in_range) Fail("{}: expected an integer in [{}, {}], got {}", key, lo, hi, Shown(v.dump()));
  return static_cast<int>(v.get<int64_t>());
}

double RealField(const json& body, const char* key, double fallback) {
  if (!Given(body, key)) return fallback;
  if (!body[key].is_number()) Fail("{}: expected a number, got {}", key, Shown(body[key].dump()));
  return body[key].get<double>();
}

bool BoolField(const json& body, const char* key, bool fallback) {
  if (!Given(body, key)) return fallback;
  if (!body[key].is_boolean())
    Fail("{}: expected true or false, got {}", key, Shown(body[key].dump()));
  return body[key].get<bool>();
}

// A list of names as a string "a,b" or an array ["a", "b"].
std::string ListField(const json& body, const char* key, const std::string& fallback) {
  if (!Given(body, key)) return fallback;
  const json& v = body[key];
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) Fail("{}: expected a list of names", key);
  std::string out;
  for (const json& e : v) {
    if (!e.is_string()) Fail("{}: expected a list of names", key);
    out += (out.empty() ? "" : ",") + e.get<std::string>();
  }
  return out;
}

BodyInput InputOf(const json& body, int texts) {
  BodyInput in;
  const bool has_file = Given(body, "file"), has_text = Given(body, "text");
  if (has_file && has_text) Fail("give a text or a file, not both");
  if (has_file) {
    if (texts == 0) Fail("file: the server was started without --texts");
    in.file = IntField(body, "file", -1, 0, texts - 1);
    return in;
  }
  if (!has_text || !body["text"].is_string()) Fail("give a text or a file");
  in.text = body["text"].get<std::string>();
  return in;
}

void ReadSamples(const json& body, int& samples, int& length, uint64_t& seed) {
  samples = IntField(body, "samples", samples, 1, kMaxSamples);
  length = IntField(body, "length", length, kMinLength, 1 << 20);
  seed = static_cast<uint64_t>(IntField(body, "seed", 0, 0, 1 << 30));
}

}  // namespace

AnalyzeBody ReadAnalyzeBody(std::string_view text, int texts) {
  const json body = Parse(text, {"text", "file", "conditions", "samples", "length", "seed", "eps",
                                 "prompt", "allow_long_context"});
  AnalyzeBody b;
  ReadSamples(body, b.samples, b.length, b.seed);
  b.conditions = ListField(body, "conditions", b.conditions);
  b.eps = RealField(body, "eps", b.eps);
  b.prompt = BoolField(body, "prompt", false);
  b.allow_long_context = BoolField(body, "allow_long_context", false);
  b.input = InputOf(body, texts);
  return b;
}

ExplainBody ReadExplainBody(std::string_view text, int texts) {
  const json body = Parse(
      text, {"text", "file", "condition", "samples", "length", "seed", "intervention_samples"});
  ExplainBody b;
  ReadSamples(body, b.samples, b.length, b.seed);
  if (Given(body, "condition")) {
    if (!body["condition"].is_string()) Fail("condition: expected one condition's name");
    b.condition = body["condition"].get<std::string>();
  }
  b.intervention_samples = IntField(body, "intervention_samples", 4, 0, kMaxSamples);
  b.input = InputOf(body, texts);
  return b;
}

StreamBody ReadStreamBody(std::string_view text, int texts) {
  const json body = Parse(text, {"text", "file", "policies", "sinks", "window", "max_tokens"});
  StreamBody b;
  b.policies = ListField(body, "policies", b.policies);
  b.sinks = IntField(body, "sinks", b.sinks, 0, 1 << 20);
  b.window = IntField(body, "window", b.window, 1, 1 << 20);
  b.max_tokens = IntField(body, "max_tokens", b.max_tokens, 2, kMaxStreamTokens);
  b.input = InputOf(body, texts);
  return b;
}

}  // namespace ss::serve
