#include "cli/common.h"

#include <fmt/format.h>

#include "cli/commands.h"
#include "common/error.h"
#include "common/file_util.h"
#include "io/load.h"
#include "tokenizer/find.h"

namespace ss::cli {

void ModelOptions::Add(CLI::App* cmd) {
  cmd->add_option("--model", model_path,
                  "Model: llama2.c .bin, GGUF file, or Hugging Face directory")->required();
  cmd->add_option("--tokenizer", tokenizer_path,
                  "Tokenizer file (default: found beside or inside the model)");
}

LoadedModel ModelOptions::Load() const {
  LoadedModel loaded;
  loaded.model = LoadModel(model_path);
  loaded.tokenizer = FindTokenizer(loaded.model, tokenizer_path);
  const ModelConfig& c = loaded.model.config;
  Log(fmt::format("loaded {} ({}, {}, {} layers, width {}, {:.2f} M parameters; tokenizer {}, {} "
                  "tokens)",
                  loaded.model.source, loaded.model.format, c.arch, c.n_layers, c.dim,
                  loaded.model.ParameterCount() / 1e6, loaded.tokenizer->kind(),
                  loaded.tokenizer->vocab_size()));
  return loaded;
}

std::string ReadInputText(const std::string& prompt, const std::string& text_file,
                          bool prompt_given, bool text_given) {
  if (prompt_given && text_given) Fail("give either --prompt or --text, not both");
  if (!prompt_given && !text_given) Fail("give --prompt TEXT or --text FILE");
  if (prompt_given) {
    if (prompt.empty()) Fail("--prompt: the prompt is empty");
    return prompt;
  }
  std::string text = ReadFile(text_file);
  if (text.empty()) Fail("--text {}: the file is empty", text_file);
  return text;
}

}  // namespace ss::cli
