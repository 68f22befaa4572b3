// Helpers shared by the verbs: loading a model with its tokenizer, and reading text input.
#pragma once

#include <memory>
#include <string>
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

}  // namespace ss::cli
