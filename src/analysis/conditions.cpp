#include "analysis/conditions.h"

#include <algorithm>

#include "common/error.h"

namespace ss::analysis {

std::string ConditionName(Condition condition) {
  switch (condition) {
    case Condition::kBos:
      return "bos";
    case Condition::kNoBos:
      return "no-bos";
    case Condition::kRandomP0:
      return "random-p0";
    case Condition::kRepeat:
      return "repeat";
  }
  return "?";
}

std::vector<Condition> ParseConditions(const std::string& list, const std::string& flag) {
  const Condition all[] = {Condition::kBos, Condition::kNoBos, Condition::kRandomP0,
                           Condition::kRepeat};
  std::vector<Condition> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    const std::string name = list.substr(begin, end - begin);
    const Condition* found = std::find_if(std::begin(all), std::end(all),
                                          [&](Condition c) { return ConditionName(c) == name; });
    if (found == std::end(all))
      Fail(
          "{}: unknown condition '{}' in '{}' (expected a comma-separated list of bos, no-bos, "
          "random-p0, repeat)",
          flag, name, list);
    if (std::find(out.begin(), out.end(), *found) != out.end())
      Fail("{}: condition '{}' is listed twice in '{}'", flag, name, list);
    out.push_back(*found);
    begin = end + 1;
  }
  return out;
}

uint64_t SplitMix64::Next() {
  // Constants from Steele, Lea and Flood, "Fast splittable pseudorandom number generators" (2014).
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::Below(uint64_t n) {
  SS_ASSERT(n > 0);
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // reject the biased tail
  uint64_t x;
  do x = Next();
  while (x >= limit);
  return x % n;
}

std::vector<int64_t> DrawWindowStarts(int64_t stream_size, const SampleSpec& spec,
                                      const std::string& source) {
  if (stream_size < spec.length)
    Fail("{}: the text has {} tokens, fewer than the sample length T = {} (--length)", source,
         stream_size, spec.length);
  SplitMix64 rng(spec.seed);
  std::vector<int64_t> starts(spec.samples);
  for (auto& s : starts) s = static_cast<int64_t>(rng.Below(stream_size - spec.length + 1));
  return starts;
}

// Draws the random-p0 tokens from a generator of their own (seed + 1), so that adding or removing
// a condition never changes another condition's samples.
static int RandomToken(SplitMix64& rng, const SampleSpec& spec) {
  SS_ASSERT(spec.vocab_size > 2);
  for (;;) {
    const int id = static_cast<int>(rng.Below(spec.vocab_size));
    if (id != spec.bos_id && id != spec.eos_id) return id;
  }
}

// The bos condition needs the model's BOS id; gpt-oss, Qwen and others declare none.
static void CheckBos(Condition condition, const SampleSpec& spec) {
  if (condition == Condition::kRandomP0 && spec.vocab_size <= 2)
    Fail(
        "the model's vocabulary has {} token(s): the 'random-p0' condition needs a token other "
        "than BOS and EOS to put first; use --conditions bos,no-bos,repeat",
        spec.vocab_size);
  if (condition == Condition::kBos && spec.bos_id < 0)
    Fail(
        "the model declares no BOS token (bos_token_id is null or absent), so the 'bos' condition "
        "has no first token; use --conditions no-bos,random-p0,repeat");
}

std::vector<std::vector<int>> BuildSamples(const std::vector<int>& stream, Condition condition,
                                           const SampleSpec& spec, const std::string& source) {
  CheckBos(condition, spec);
  const std::vector<int64_t> starts =
      DrawWindowStarts(static_cast<int64_t>(stream.size()), spec, source);
  SplitMix64 token_rng(spec.seed + 1);
  const int T = spec.length;
  std::vector<std::vector<int>> samples;
  samples.reserve(starts.size());
  for (int64_t start : starts) {
    const int* window = stream.data() + start;
    std::vector<int> s(T);
    switch (condition) {
      case Condition::kBos:
        s[0] = spec.bos_id;
        std::copy(window, window + T - 1, s.begin() + 1);
        break;
      case Condition::kNoBos:
        std::copy(window, window + T, s.begin());
        break;
      case Condition::kRandomP0:
        s[0] = RandomToken(token_rng, spec);
        std::copy(window, window + T - 1, s.begin() + 1);
        break;
      case Condition::kRepeat:
        std::fill(s.begin(), s.end(), window[0]);
        break;
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

std::vector<int> PromptSample(const std::vector<int>& prompt, Condition condition,
                              const SampleSpec& spec) {
  SS_ASSERT(!prompt.empty());
  CheckBos(condition, spec);
  std::vector<int> s;
  switch (condition) {
    case Condition::kBos:
      s.push_back(spec.bos_id);
      s.insert(s.end(), prompt.begin(), prompt.end());
      break;
    case Condition::kNoBos:
      s = prompt;
      break;
    case Condition::kRandomP0: {
      SplitMix64 token_rng(spec.seed + 1);
      s.push_back(RandomToken(token_rng, spec));
      s.insert(s.end(), prompt.begin(), prompt.end());
      break;
    }
    case Condition::kRepeat:
      s.assign(prompt.size(), prompt[0]);
      break;
  }
  return s;
}

}  // namespace ss::analysis
