// Helpers shared by the verbs: loading a model with its tokenizer, and reading text input.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/conditions.h"
#include "common/file_util.h"
#include "kernels/gemm_ggml.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace ss::cli {

struct LoadedModel {
  Model model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// The model a verb reads: --model, --tokenizer and, where the verb runs forwards, --precision
// (cli/options.h declares them).
struct ModelOptions {
  std::string model_path;
  std::string tokenizer_path;
  // --precision where the verb takes it (Add with_precision); empty: the file's (FilePrecision).
  std::string precision;
  std::string precision_reason = "--precision";  // why `precision` was set, for the log
  // by_default: the verb's default for --activations (with --precision only).
  void Add(CLI::App* cmd, bool with_precision = false,
           GgmlActivations by_default = GgmlActivations::kF32);
  LoadedModel Load() const;  // logs a one-line summary to stderr
};

// ---- Numeric flags: one check, one message shape ("--eps: expected a number in (0, 1], got nan").
// A real flag must be finite; NaN fails every range (CLI11's Range lets NaN through).
enum class Bound { kOpen, kClosed };
// `what` names the kind of value in the message: "a number", "a threshold", "a sink rate".
void CheckReal(const std::string& flag, double value, double lo, Bound lo_bound, double hi,
               Bound hi_bound, const char* what = "a number");
void CheckInt(const std::string& flag, int64_t value, int64_t lo, int64_t hi);

// The seed `text` (a --seed value: cli/options.h AddSeedOption) stands for, an integer in
// [0, 2^64 - 1]; throws ss::Error naming `flag` otherwise.
uint64_t ParseSeed(const std::string& flag, const std::string& text);

// --temperature and --top-p of generate and chat.
struct SamplingOptions {
  float temperature = 1.0f;
  float top_p = 0.9f;
  void Add(CLI::App* cmd, float default_temperature);
  void Validate() const;  // temperature in [0, 100] (0: greedy), top-p in (0, 1]
};

// ---- Options that analyze, explain and trace share, validated here once (declared in
// cli/options.cpp, the option table).

// The samples: how many, how long, from which seed, cut from which input.
struct SampleOptions {
  // At least 4 tokens: position 0, the first keys K <= 4 of the sink metrics, and a query after
  // them (explain's interventions and trace's profiles need them; analyze uses the same rule).
  static constexpr int kMinLength = 4;
  std::string text_file, prompt, tokens_file, tokenizer;
  int samples = 16;
  int length = 64;
  uint64_t seed = 0;
  CLI::Option* prompt_option = nullptr;  // null when the verb has no --prompt
  bool prompt_given = false;             // set by front ends without flags (the Python module)
  // Adds --samples (default `default_samples`), --length, --seed, --text, --tokenizer and, when
  // `prompt_and_tokens`, --prompt and --tokens (mutually exclusive with --text).
  void Add(CLI::App* cmd, int default_samples, bool prompt_and_tokens);
  bool has_prompt() const { return prompt_given || (prompt_option && prompt_option->count() > 0); }
  // Flag domains, the input files (regular files, not over kMaxInputTextBytes) and the memory the
  // samples of `conditions` conditions take (before anything is read or allocated).
  void Validate(int conditions) const;
};

// The sink threshold, and the first keys tracked (analyze's --first-k).
struct SinkOptions {
  double eps = 0.3;
  int first_k = 4;
  void Add(CLI::App* cmd, bool with_first_k);
  void Validate() const;
};

// The layer thresholds of explain and trace: the first layer whose sink rate exceeds
// --onset-threshold (trace's --onset-rate) is the onset layer; the first whose P0 norm ratio
// exceeds
// --amplification-threshold (--amplification-ratio) the amplification layer.
struct LayerThresholdOptions {
  double onset = 0.5;
  double amplification = 3.0;
  void Add(CLI::App* cmd);
  void Validate() const;
};

// --conditions: first-token conditions (analyze: a list; explain: exactly one).
struct ConditionOptions {
  std::string list;
  // `note`: what the verb takes (analyze: a comma-separated list; explain: one).
  void Add(CLI::App* cmd, const std::string& default_list, std::string_view note);
  std::vector<analysis::Condition> Parse(bool single) const;
};

// T against the model's trained context: beyond it only for a RoPE model and with `allow_long`
// (analyze's --allow-long-context); a learned position table has no rows past it. Also refuses a
// T whose forward would need more memory than is available (figure in the message).
// `allow_name`: how the caller's interface spells the permission ("--allow-long-context",
// Python's "allow_long_context=True"; empty where there is none); `flag`: what set T ("--length",
// or the input's flag when T comes from a prompt).
void CheckLength(const ModelConfig& config, int T, bool allow_long, std::string_view allow_name,
                 std::string_view flag = "--length");
inline constexpr std::string_view kAllowLongFlag = "--allow-long-context";

// Returns the text of --prompt or the contents of --text FILE (exactly one must be given).
// Throws ss::Error for an empty result, naming the flag.
std::string ReadInputText(const std::string& prompt, const std::string& text_file,
                          bool prompt_given, bool text_given);

// The text `analyze` and `explain` sample when given no --text, --prompt or --tokens: the shipped
// data/default_text.txt, compiled into the binary.
std::string_view DefaultText();

// The token stream `analyze` and `explain` cut their samples from: --tokens FILE (ids), --prompt
// TEXT, --text FILE, or the built-in default text; text is encoded without BOS (each first-token
// condition decides what sits at position 0). `flag` names the input in error messages.
struct SampleStream {
  std::vector<int> tokens;
  std::string source;  // for reports: "text PATH", "prompt", "token ids PATH", "default text"
  std::string flag;    // for errors: "--text PATH", "--prompt", "--tokens PATH", "default text"
};
SampleStream ReadSampleStream(const Model& model, const std::string& text_file,
                              const std::string& prompt, bool has_prompt,
                              const std::string& tokens_file, const std::string& tokenizer);

// Writes the --json and --html outputs (each skipped when its path is empty) under the output
// policy of common/file_util.h; both are written completely before either replaces its target.
void WriteReports(const std::string& json_path, const std::string& json_text,
                  const std::string& html_path, const std::string& html_text);

// The files a --model or --checkpoints path stands for, as inputs for CheckOutputs (so that no
// report overwrites them): a model file and the tokenizer files beside it (tok*.bin,
// tokenizer.*), or the model, tokenizer and trainer files of a directory and of its
// sub-directories (a run's step-<N>/ checkpoints).
std::vector<FlagPath> ModelInputs(const std::string& flag, const std::string& path);
// The --text, --tokens and --tokenizer files (each skipped if empty), then ModelInputs of --model.
std::vector<FlagPath> SampleInputs(const std::string& model, const std::string& text_file,
                                   const std::string& tokens_file, const std::string& tokenizer);

// --precision f32|bf16|q8_0|native (cli/options.h) on the verbs that run forwards: analyze,
// explain, trace, stream, ppl, generate, chat. Not given (empty): the file's own (io/load.h
// FilePrecision: native, or f32 for a file that stores every weight as F32). The flag's value
// checked (empty passes: the file decides), before anything is loaded.
void CheckPrecisionFlag(const std::string& precision);
// An --activations value: f32 or int8; throws ss::Error naming `flag` otherwise.
GgmlActivations ParseActivations(const std::string& value, const std::string& flag);
// The precision `precision` (a --precision value, or empty for the file's) stands for on the model
// at `path`, and the log line that says which and why: "precision native (the file's: weights
// stored as BF16, F32; ...)", or "precision bf16 (<reason>)" for a value given.
struct PrecisionChoice {
  Precision precision;
  std::string line;
};
PrecisionChoice ResolvePrecision(const std::string& path, const std::string& precision,
                                 const std::string& reason = "--precision");
// Loads the model at that precision (io/load.h: at bf16 or q8_0 the projections are held in that
// form only, never in f32) and logs a note when the kernel runs on its portable path. The choice's
// line waits (PendingLog) for the verb's work to start.
Model LoadModelAt(const std::string& path, const std::string& precision,
                  const std::string& reason = "--precision");
// The line LoadModelAt leaves to be logged once the verb has checked its input and starts work, so
// that a refused input keeps its error to one line. LogPending logs it (nothing if none is left:
// the Python module and serve share the verbs' code); TakePending hands it over to be folded into
// another line.
void LogPending();
std::string TakePending();

}  // namespace ss::cli
