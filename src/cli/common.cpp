#include "cli/common.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

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

std::vector<int> ReadTokenIds(const std::string& path, int vocab_size) {
  const std::string text = ReadFile(path);
  std::vector<int> ids;
  size_t i = 0, line = 1;
  auto space = [](char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'; };
  while (i < text.size()) {
    if (space(text[i])) {
      line += text[i++] == '\n';
      continue;
    }
    size_t j = i;
    while (j < text.size() && !space(text[j])) ++j;
    const std::string item = text.substr(i, j - i);
    const bool digits = item.size() <= 9 && std::all_of(item.begin(), item.end(), [](char ch) {
      return ch >= '0' && ch <= '9';
    });
    if (!digits)
      Fail("--tokens {}: line {}: '{}' is not a token id (expected non-negative integers separated "
           "by whitespace)", path, line, item.substr(0, 24));
    const int id = std::stoi(item);
    if (id >= vocab_size)
      Fail("--tokens {}: line {}: token id {} is outside the model's vocabulary [0, {})", path, line,
           id, vocab_size);
    ids.push_back(id);
    i = j;
  }
  return ids;
}

SampleStream ReadSampleStream(const Model& model, const std::string& text_file,
                              const std::string& prompt, bool has_prompt,
                              const std::string& tokens_file, const std::string& tokenizer) {
  SampleStream s;
  auto encode = [&](std::string_view text) {
    return FindTokenizer(model, tokenizer)->Encode(std::string(text), /*add_bos=*/false);
  };
  if (!tokens_file.empty()) {
    s.tokens = ReadTokenIds(tokens_file, model.config.vocab_size);
    s.source = "token ids " + tokens_file;
    s.flag = "--tokens " + tokens_file;
  } else if (has_prompt) {
    if (prompt.empty()) Fail("--prompt: the prompt is empty");
    s.tokens = encode(prompt);
    s.source = "prompt";
    s.flag = "--prompt";
  } else if (!text_file.empty()) {
    s.tokens = encode(ReadFile(text_file));
    s.source = "text " + text_file;
    s.flag = "--text " + text_file;
  } else {
    s.tokens = encode(DefaultText());
    s.source = s.flag = "default text";
  }
  if (s.tokens.empty()) Fail("{}: no tokens to analyse", s.flag);
  return s;
}

void WriteReports(const std::string& json_path, const std::string& json_text,
                  const std::string& html_path, const std::string& html_text) {
  // Both are written and closed before either is renamed into place, so a failed write (a full
  // disk) leaves the previous files as they were.
  std::vector<std::unique_ptr<OutputFile>> outputs;
  for (const auto& [path, text] :
       {std::pair{&json_path, &json_text}, std::pair{&html_path, &html_text}}) {
    if (path->empty()) continue;
    outputs.push_back(std::make_unique<OutputFile>(*path));
    if (std::fwrite(text->data(), 1, text->size(), outputs.back()->file()) != text->size())
      Fail("{}: write failed: {}", *path, std::strerror(errno));
    outputs.back()->Close();
  }
  for (auto& out : outputs) {
    out->Commit();
    Log("wrote " + out->target().path);
  }
}

namespace {

bool IsModelFileName(const std::string& name) {
  auto ends = [&](std::string_view suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return name == "config.json" || name == "generation_config.json" ||
         name == "special_tokens_map.json" || name == "vocab.json" || name == "merges.txt" ||
         name == "train_config.json" || name == "trainer_state.json" ||
         name.rfind("tokenizer", 0) == 0 || ends(".safetensors") ||
         ends(".safetensors.index.json") || ends(".gguf") || ends(".bin");
}

}  // namespace

std::vector<FlagPath> ModelInputs(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<FlagPath> inputs;
  if (path.empty()) return inputs;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    inputs.push_back({flag, path});
    // A llama2.c model's tokenizer is found beside it (tokenizer/find.h).
    const fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : ".";
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.rfind("tok", 0) == 0 && IsModelFileName(name))
        inputs.push_back({flag, it->path().string()});
    }
    return inputs;
  }
  // A model directory, a checkpoint, or a run directory of checkpoints (step-<N>/...).
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (it.depth() >= 1) it.disable_recursion_pending();
    if (it->is_regular_file(ec) && IsModelFileName(it->path().filename().string()))
      inputs.push_back({flag, it->path().string()});
  }
  return inputs;
}

std::vector<FlagPath> SampleInputs(const std::string& model, const std::string& text_file,
                                   const std::string& tokens_file, const std::string& tokenizer) {
  std::vector<FlagPath> inputs = ModelInputs("--model", model);
  inputs.push_back({"--text", text_file});
  inputs.push_back({"--tokens", tokens_file});
  inputs.push_back({"--tokenizer", tokenizer});
  return inputs;
}

}  // namespace ss::cli
