// First-token conditions and sample construction for `sinkscope analyze` (DESIGN.md "analyze").
// A condition decides what sits at position 0 of every sample; the rest of the sample is the same
// text window in every condition, so the conditions differ only in their first token:
//   bos        BOS, then the first T-1 tokens of the window
//   no-bos     the first T tokens of the window (a text token at position 0)
//   random-p0  a uniformly drawn vocabulary token (never BOS/EOS), then the first T-1 window tokens
//   repeat     the window's first token repeated T times
// Windows are cut from a token stream at random offsets drawn from a seeded SplitMix64 generator
// (Steele et al. 2014), so a (stream, seed) pair always gives the same samples on every platform.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ss::analysis {

enum class Condition { kBos, kNoBos, kRandomP0, kRepeat };

std::string ConditionName(Condition condition);  // "bos", "no-bos", "random-p0", "repeat"
// Parses a comma-separated list ("bos,no-bos"); throws ss::Error naming `flag` for an unknown
// name, an empty list or a repeated name.
std::vector<Condition> ParseConditions(const std::string& list, const std::string& flag);

// SplitMix64: a small, fully specified generator (the same numbers with every standard library).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  uint64_t Below(uint64_t n);  // uniform in [0, n), n > 0 (rejection sampling, no modulo bias)

 private:
  uint64_t state_;
};

struct SampleSpec {
  int samples = 64;  // N
  int length = 64;   // T
  uint64_t seed = 0;
  int vocab_size = 0;  // V, for random-p0
  int bos_id = 1;
  int eos_id = 2;
};

// Where each sample's window starts in the stream: N offsets in [0, stream_size - T], drawn from
// the seed only (the same windows for every condition). Throws ss::Error naming `source` if the
// stream has fewer than T tokens.
std::vector<int64_t> DrawWindowStarts(int64_t stream_size, const SampleSpec& spec,
                                      const std::string& source);

// N samples of T token ids for one condition. `stream` holds text tokens without BOS.
std::vector<std::vector<int>> BuildSamples(const std::vector<int>& stream, Condition condition,
                                           const SampleSpec& spec, const std::string& source);

// One sample from a whole prompt (the --prompt path): bos and random-p0 put their token before the
// prompt (T = n + 1), no-bos is the prompt itself and repeat repeats its first token n times.
std::vector<int> PromptSample(const std::vector<int>& prompt, Condition condition,
                              const SampleSpec& spec);

}  // namespace ss::analysis
