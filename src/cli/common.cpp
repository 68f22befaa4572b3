#include "cli/common.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "cli/commands.h"
#include "common/error.h"
#include "common/file_util.h"
#include "io/load.h"
#include "io/token_ids.h"
#include "kernels/dequant.h"
#include "model/precision.h"
#include "tokenizer/find.h"

namespace ss::cli {

void Log(const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }

LoadedModel ModelOptions::Load() const {
  LoadedModel loaded;
  loaded.model = LoadModelAt(model_path, precision, precision_reason);
  loaded.tokenizer = FindTokenizer(loaded.model, tokenizer_path);
  const ModelConfig& c = loaded.model.config;
  Log(
      fmt::format("loaded {} ({}, {}, {} layers, width {}, {:.2f} M parameters; tokenizer {}, {} "
                  "tokens); {}",
                  loaded.model.source, loaded.model.format, c.arch, c.n_layers, c.dim,
                  loaded.model.ParameterCount() / 1e6, loaded.tokenizer->kind(),
                  loaded.tokenizer->vocab_size(), TakePending()));
  return loaded;
}

void CheckReal(const std::string& flag, double value, double lo, Bound lo_bound, double hi,
               Bound hi_bound, const char* what) {
  const bool above = lo_bound == Bound::kOpen ? value > lo : value >= lo;
  const bool below = hi_bound == Bound::kOpen ? value < hi : value <= hi;
  if (std::isfinite(value) && above && below) return;
  auto end = [](double v) {
    return std::isinf(v) ? std::string(v < 0 ? "-inf" : "inf") : fmt::format("{}", v);
  };
  Fail("{}: expected {} in {}{}, {}{}, got {}", flag, what, lo_bound == Bound::kOpen ? "(" : "[",
       end(lo), end(hi), hi_bound == Bound::kOpen ? ")" : "]", value);
}

void CheckInt(const std::string& flag, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi)
    Fail("{}: expected an integer in [{}, {}], got {}", flag, lo, hi, value);
}

uint64_t ParseSeed(const std::string& flag, const std::string& text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || ec != std::errc() || ptr != end)
    Fail("{}: expected an integer in [0, {}], got {}", flag, std::numeric_limits<uint64_t>::max(),
         PrintableExcerpt(text, 40));
  return value;
}

void SamplingOptions::Validate() const {
  CheckReal("--temperature", temperature, 0, Bound::kClosed, 100, Bound::kClosed);
  CheckReal("--top-p", top_p, 0, Bound::kOpen, 1, Bound::kClosed);
}

void SampleOptions::Validate(int conditions) const {
  CheckInt("--samples", samples, 1, std::numeric_limits<int>::max());
  CheckInt("--length", length, kMinLength, std::numeric_limits<int>::max());
  if (has_prompt() && prompt.empty()) Fail("--prompt: the prompt is empty");
  // The inputs must be regular files within the input cap: checked here, before the model loads.
  uint64_t size = 0;
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--text", text_file},
                                   {"--tokens", tokens_file}}) {
    if (path.empty()) continue;
    close(OpenRegularFile(path, &size));
    if (size > kMaxInputTextBytes)
      Fail("{} {}: the file is {} bytes, more than the {} ({} bytes) an input text may have", flag,
           path, size, FormatBytes(kMaxInputTextBytes), kMaxInputTextBytes);
  }
  // Every sample is a vector of T ids (plus its allocation overhead) per condition.
  if (!has_prompt()) {
    const uint64_t bytes = static_cast<uint64_t>(conditions) * static_cast<uint64_t>(samples) *
                           (static_cast<uint64_t>(length) * sizeof(int) + 64);
    CheckMemory(bytes,
                fmt::format("--samples {} x --length {}{}", samples, length,
                            conditions > 1 ? fmt::format(" x {} conditions", conditions) : ""));
  }
}

void SinkOptions::Validate() const {
  CheckReal("--eps", eps, 0, Bound::kOpen, 1, Bound::kClosed, "a threshold");
  CheckInt("--first-k", first_k, 1, 64);
}

void LayerThresholdOptions::Validate() const {
  // Both verbs compare with ">": 1 could never be exceeded, and 0 would call any single sink
  // head an onset.
  CheckReal("--onset-threshold", onset, 0, Bound::kOpen, 1, Bound::kOpen, "a sink rate");
  CheckReal("--amplification-threshold", amplification, 0, Bound::kOpen,
            std::numeric_limits<double>::infinity(), Bound::kOpen, "a norm ratio");
}

std::vector<analysis::Condition> ConditionOptions::Parse(bool single) const {
  std::vector<analysis::Condition> conditions = analysis::ParseConditions(list, "--conditions");
  if (single && conditions.size() != 1)
    Fail("--conditions: this verb runs one condition at a time, got '{}'", list);
  return conditions;
}

void CheckLength(const ModelConfig& c, int T, bool allow_long, std::string_view allow_name,
                 std::string_view flag) {
  if (c.max_seq_len > 0 && T > c.max_seq_len) {
    if (c.rope == RopeKind::kNone)
      Fail(
          "{}: T = {} exceeds the model's context of {} tokens, and its learned position "
          "embeddings have no entries beyond it",
          flag, T, c.max_seq_len);
    if (!allow_long)
      Fail("{}: T = {} exceeds the model's trained context of {} tokens{}", flag, T, c.max_seq_len,
           allow_name.empty()
               ? std::string()
               : fmt::format("; pass {} to run a RoPE model past it anyway", allow_name));
  }
  // One forward's buffers: the residual and sublayer rows (3 T D), q and z (2 T H Dh), the shared
  // single-use K/V (2 T Hkv Dh), and the fused statistics (L H T (K + 3), K <= 64 kept as 8 here).
  const double floats = static_cast<double>(T) * (3.0 * c.dim + 2.0 * c.q_dim() + 2.0 * c.kv_dim() +
                                                  8.0 * c.n_layers * c.n_heads);
  const double bytes = floats * sizeof(float);
  if (bytes >= 1.8e19) Fail("{}: T = {} is far beyond any memory", flag, T);
  CheckMemory(static_cast<uint64_t>(bytes), fmt::format("{} (T = {})", flag, T));
}

std::string ReadInputText(const std::string& prompt, const std::string& text_file,
                          bool prompt_given, bool text_given) {
  if (prompt_given && text_given) Fail("give either --prompt or --text, not both");
  if (!prompt_given && !text_given) Fail("give --prompt TEXT or --text FILE");
  if (prompt_given) {
    if (prompt.empty()) Fail("--prompt: the prompt is empty");
    return prompt;
  }
  std::string text = ReadInputFile(text_file, "--text");
  if (text.empty()) Fail("--text {}: the file is empty", text_file);
  return text;
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
    s.tokens = encode(ReadInputFile(text_file, "--text"));
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
  // The files given by their own flag come first: CheckOutputs names the first input an output
  // matches, and a --tokenizer beside a llama2.c model is among ModelInputs' files too.
  std::vector<FlagPath> inputs = {
      {"--text", text_file}, {"--tokens", tokens_file}, {"--tokenizer", tokenizer}};
  for (FlagPath& f : ModelInputs("--model", model)) inputs.push_back(std::move(f));
  return inputs;
}

GgmlActivations ParseActivations(const std::string& value, const std::string& flag) {
  if (value == "f32") return GgmlActivations::kF32;
  if (value == "int8") return GgmlActivations::kInt8;
  Fail("{}: expected f32 or int8, got '{}'", flag, value);
}

void CheckPrecisionFlag(const std::string& precision) {
  if (!precision.empty()) ParsePrecision(precision);
}

namespace {
std::string pending_line;  // LoadModelAt's precision line, until the verb's work starts
}  // namespace

PrecisionChoice ResolvePrecision(const std::string& path, const std::string& precision,
                                 const std::string& reason) {
  // At native, the types whose products take x in int8 (--activations), if any; at q8_0, whether
  // its blocks' do.
  const auto int8 = [](Precision p) {
    std::string types;
    if (p == Precision::kNative) types = Int8ActivationTypes();
    if (p == Precision::kQ8_0 && GgmlActivationsFor(kGgmlTypeQ8_0) == GgmlActivations::kInt8)
      types = "Q8_0";
    return types.empty() ? std::string()
                         : fmt::format("; x in int8 for {} weights (--activations; {} kernels)",
                                       types, Int8ActivationsKernel());
  };
  if (!precision.empty()) {
    const Precision p = ParsePrecision(precision);
    return {p, fmt::format("precision {} ({}){}", PrecisionName(p), reason, int8(p))};
  }
  std::string why;
  const Precision p = FilePrecision(path, &why);
  return {p, fmt::format("precision {} (the file's: {}{}){}", PrecisionName(p), why,
                         p == Precision::kF32 ? "" : "; --precision f32 for the f32 reference",
                         int8(p))};
}

Model LoadModelAt(const std::string& path, const std::string& precision,
                  const std::string& reason) {
  const PrecisionChoice choice = ResolvePrecision(path, precision, reason);
  if (const std::string note = PrecisionNote(choice.precision); !note.empty()) Log("note: " + note);
  Model model = LoadModel(path, choice.precision);
  pending_line = choice.line;
  return model;
}

void LogPending() {
  if (!pending_line.empty()) Log(TakePending());
}

std::string TakePending() { return std::exchange(pending_line, std::string()); }

}  // namespace ss::cli
