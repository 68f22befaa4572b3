// Helpers shared by the verbs: loading a model with its tokenizer, and reading text input.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace ss::cli {

struct LoadedModel {
  Model model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Options every model-reading verb has: --model, --tokenizer.
struct ModelOptions {
  std::string model_path;
  std::string tokenizer_path;
  void Add(CLI::App* cmd);
  LoadedModel Load() const;  // logs a one-line summary to stderr
};

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

// Writes the --json and --html outputs (each skipped when its path is empty), atomically; if the
// HTML cannot be written the JSON is removed again, so a failed run leaves neither.
void WriteReports(const std::string& json_path, const std::string& json_text,
                  const std::string& html_path, const std::string& html_text);

// Token ids from a file of whitespace-separated non-negative integers, each in [0, vocab_size)
// (a pre-tokenized stream for --tokens). Throws ss::Error naming the file, the line and the item.
std::vector<int> ReadTokenIds(const std::string& path, int vocab_size);

// --precision f32|bf16 (default f32) on the verbs that run forwards in bulk: analyze, explain, trace.
void AddPrecisionOption(CLI::App* cmd, std::string* precision);
// Sets the loaded model's precision (model/precision.h; the name was checked by ParsePrecision
// before the load) and logs a note when bf16 runs on the portable path.
void ApplyPrecision(Model& model, const std::string& precision);

}  // namespace ss::cli
