// The option table (cli/options.h) and every declaration of its flags: the groups' Add functions
// of common.h and verbs.h are defined here, so that a shared flag's name, help and default are in
// this one file.
#include "cli/options.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "common/error.h"
#include "common/file_util.h"
#include "kernels/parallel.h"

namespace ss::cli {

const char* OptionGroupName(OptionGroup group) {
  switch (group) {
    case OptionGroup::kModel:
      return "Model";
    case OptionGroup::kInput:
      return "Input";
    case OptionGroup::kSamples:
      return "Samples";
    case OptionGroup::kSinks:
      return "Sink metrics";
    case OptionGroup::kSampling:
      return "Sampling";
    case OptionGroup::kCache:
      return "KV cache";
    case OptionGroup::kOutput:
      return "Output";
    case OptionGroup::kRuntime:
      return "Runtime";
    case OptionGroup::kVerb:
      return "Options";
  }
  return "Options";
}

namespace {

template <typename T>
std::string Shown(const T& value) {
  return CLI::detail::to_string(value);  // as capture_default_str shows it
}

std::vector<OptionSpec> MakeTable() {
  using G = OptionGroup;
  const SampleOptions samples;
  const SinkOptions sinks;
  const LayerThresholdOptions layers;
  const SamplingOptions sampling;
  const CacheOptions cache;
  return {
      // ---- Model
      {"--model", G::kModel, "Model: llama2.c .bin, GGUF file, or Hugging Face directory"},
      {"--tokenizer", G::kModel, "Tokenizer file (default: found beside or inside the model)"},
      {"--precision", G::kModel,
       "Weights and matrix products in f32 (the reference), bf16 (weights held in bf16 only: half "
       "the memory; bf16 operands, f32 sums), q8_0 (weights held as Q8_0 blocks: 28 % of the "
       "memory; x as --activations says) or native (each projection kept in the type the file "
       "stores: F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, MXFP4, mapped from the file; x in f32 or, for "
       "the quantised types, as --activations says). "
       "Default: the file's, native, or f32 for a file that stores every weight as F32"},
      {"--activations", G::kModel,
       "x in the products with Q4_0, Q4_K, Q6_K, Q8_0 and MXFP4 weights at native precision, and "
       "with the Q8_0 blocks of --precision q8_0: "
       "f32 (the f32 forward's numbers on the stored weights) or int8 (each 32 values rounded to "
       "int8 against their largest and multiplied with the weights' integer codes, as llama.cpp "
       "and llama2.c's runq.c do; the weights packed at load: 1.6-3.3x the decode speed of the "
       "4- and 6-bit types, each product off by a few thousandths of the sum of its terms' sizes; "
       "docs/DESIGN.md). Default: int8 on generate, chat and stream, whose speed is decode's "
       "(each token reads every weight once; with f32 x the 4- and 6-bit types' products are "
       "bound by their arithmetic, not by memory); f32 on the verbs that measure",
       "", /*verb_default=*/true},
      // ---- Input
      {"--prompt", G::kInput, "The input text, given here"},
      {"--text", G::kInput,
       fmt::format("The input text, from a UTF-8 file (at most {} MiB)", kMaxInputTextBytes >> 20)},
      {"--tokens", G::kInput, "The input as token ids (whitespace-separated)"},
      {"--no-bos", G::kInput, "Do not put BOS before the input", "", false, /*is_flag=*/true},
      // ---- Samples (analyze, explain, trace)
      {"--samples", G::kSamples, "Samples (N), at least 1", "", /*verb_default=*/true},
      {"--length", G::kSamples,
       fmt::format("Tokens per sample (T), at least {}", SampleOptions::kMinLength),
       Shown(samples.length)},
      {"--conditions", G::kSamples,
       "First-token conditions (bos, no-bos, random-p0, repeat; docs/ANALYZE.md)", "",
       /*verb_default=*/true},
      {"--seed", G::kSampling, "Seed, an integer in [0, 2^64 - 1]", "", /*verb_default=*/true},
      // ---- Sink metrics (analyze, explain, trace)
      {"--eps", G::kSinks, "Sink threshold on alpha_k, in (0, 1]", Shown(sinks.eps)},
      {"--first-k", G::kSinks, "K: alpha_k for k < K (1..64)", Shown(sinks.first_k)},
      {"--onset-threshold,--onset-rate", G::kSinks,
       "Per-layer sink rate above which a layer has a sink (the onset layer), in (0, 1)",
       Shown(layers.onset)},
      {"--amplification-threshold,--amplification-ratio", G::kSinks,
       "P0 norm ratio above which a layer amplifies position 0, > 0", Shown(layers.amplification)},
      // ---- Sampling (generate, chat)
      {"--temperature", G::kSampling, "0 = greedy, up to 100", "", /*verb_default=*/true},
      {"--top-p", G::kSampling, "Nucleus sampling mass, in (0, 1]", Shown(sampling.top_p)},
      // ---- KV cache (generate, chat, stream)
      {"--policy", G::kCache,
       "sinks (the first S tokens and the W most recent: StreamingLLM), window (the S + W most "
       "recent) or recompute (those, re-encoded for every token) run past the context in constant "
       "memory; dense keeps every token, up to the model's context (docs/STREAMING.md)",
       cache.policy},
      {"--sinks", G::kCache,
       "S: the first tokens the sinks policy keeps (window and recompute keep S + W recent ones)",
       Shown(cache.sinks)},
      {"--window", G::kCache, "W: the most recent tokens kept (the current one included)",
       Shown(cache.window)},
      {"--force", G::kCache, "Allow --sinks + --window beyond the model's context", "", false,
       /*is_flag=*/true},
      {"--kv-type", G::kCache,
       "KV cache storage: f32 | bf16 | f16 | q8_0 | q4_0 (attention reads it decoded, sums in f32; "
       "docs/STREAMING.md)",
       cache.kv.type},
      {"--kv-type-k", G::kCache, "Storage of the keys (default: --kv-type)"},
      {"--kv-type-v", G::kCache, "Storage of the values (default: --kv-type)"},
      {"--kv-keep", G::kCache,
       "Entries a typed cache keeps in f32: none | first:N | detected (the positions the model's "
       "heads use as sinks on the first tokens)",
       cache.kv.keep},
      // ---- Output
      {"--json", G::kOutput, "Write the results as JSON (schema sinkscope.{verb}/1)"},
      {"--html", G::kOutput, "Write a self-contained HTML report"},
      // ---- Runtime (every verb)
      {"--threads", G::kRuntime,
       fmt::format("Threads for the whole process, 1 to {} (default: the cores available)",
                   kMaxThreads)},
  };
}

bool HasName(const OptionSpec& spec, std::string_view name) {
  size_t start = 0;
  while (start <= spec.names.size()) {
    const size_t comma = std::min(spec.names.find(',', start), spec.names.size());
    if (std::string_view(spec.names).substr(start, comma - start) == name) return true;
    start = comma + 1;
  }
  return false;
}

template <typename T>
CLI::Option* Declare(CLI::App* cmd, std::string_view name, T* value, std::string_view note) {
  const OptionSpec& spec = FindOption(name);
  CLI::Option* option =
      cmd->add_option(spec.names, *value, OptionHelp(spec, cmd->get_name(), note));
  option->group(OptionGroupName(spec.group));
  if (!spec.default_text.empty() || spec.verb_default) option->capture_default_str();
  return option;
}

}  // namespace

const std::vector<OptionSpec>& OptionTable() {
  static const std::vector<OptionSpec> table = MakeTable();
  return table;
}

const OptionSpec& FindOption(std::string_view name) {
  for (const OptionSpec& spec : OptionTable())
    if (HasName(spec, name)) return spec;
  throw std::logic_error(fmt::format("{}: not in the option table (cli/options.cpp)", name));
}

std::string OptionHelp(const OptionSpec& spec, std::string_view verb, std::string_view note) {
  std::string help = spec.help;
  if (const size_t at = help.find("{verb}"); at != std::string::npos) help.replace(at, 6, verb);
  if (!note.empty()) help += fmt::format("; {}", note);
  return help;
}

const std::vector<OwnMeaning>& OwnMeanings() {
  static const std::vector<OwnMeaning> own = {
      {"train", "--threads", "a config key: 0 is the default, and the count is stored in the run"},
      {"train", "--precision", "a config key: the training products, f32 or bf16"},
      {"train", "--no-bos", "a config key: the training sequences' position 0, beside --bos"},
      {"convert", "--force", "replaces an existing --out file"},
  };
  return own;
}

CLI::Option* AddOption(CLI::App* cmd, std::string_view name, std::string* value,
                       std::string_view note) {
  return Declare(cmd, name, value, note);
}
CLI::Option* AddOption(CLI::App* cmd, std::string_view name, int* value, std::string_view note) {
  return Declare(cmd, name, value, note);
}
CLI::Option* AddOption(CLI::App* cmd, std::string_view name, double* value, std::string_view note) {
  return Declare(cmd, name, value, note);
}
CLI::Option* AddOption(CLI::App* cmd, std::string_view name, float* value, std::string_view note) {
  return Declare(cmd, name, value, note);
}

CLI::Option* AddFlag(CLI::App* cmd, std::string_view name, bool* value, std::string_view note) {
  const OptionSpec& spec = FindOption(name);
  return cmd->add_flag(spec.names, *value, OptionHelp(spec, cmd->get_name(), note))
      ->group(OptionGroupName(spec.group));
}

// ---- Model

void AddModelOptions(CLI::App* cmd, std::string* model, std::string* tokenizer,
                     std::string* precision, GgmlActivations by_default) {
  if (model) AddOption(cmd, "--model", model)->required();
  if (tokenizer) AddOption(cmd, "--tokenizer", tokenizer);
  if (precision) AddPrecisionOption(cmd, precision, by_default);
}

CLI::Option* AddPrecisionOption(CLI::App* cmd, std::string* precision, GgmlActivations by_default) {
  // --activations takes effect as it is parsed: the choice is the process's (kernels/gemm_ggml.h),
  // made before the verb loads its model, whose Q4_0, Q4_K, Q6_K, Q8_0 and MXFP4 weights are packed
  // as they load. The verb's default is set as its arguments start to be parsed (so an
  // --activations given overrides it), unless SINKSCOPE_INT8_ACTIVATIONS made the choice at
  // start-up; --help shows the verb's default.
  static std::string parsed;  // unread: the choice is the process's, set by the callbacks
  cmd->preparse_callback([by_default](size_t) {
    if (std::getenv("SINKSCOPE_INT8_ACTIVATIONS") == nullptr) SetGgmlActivationsForAll(by_default);
  });
  AddOption(cmd, "--activations", &parsed)
      ->each([](const std::string& value) {
        SetGgmlActivationsForAll(ParseActivations(value, "--activations"));
      })
      ->default_str(by_default == GgmlActivations::kInt8 ? "int8" : "f32");
  return AddOption(cmd, "--precision", precision);
}

void ModelOptions::Add(CLI::App* cmd, bool with_precision, GgmlActivations by_default) {
  AddModelOptions(cmd, &model_path, &tokenizer_path, with_precision ? &precision : nullptr,
                  by_default);
}

// ---- Input

InputOptions AddInputOptions(CLI::App* cmd, const InputFlags& f) {
  InputOptions in;
  if (f.prompt) in.prompt = AddOption(cmd, "--prompt", f.prompt, f.prompt_note);
  if (f.text) in.text = AddOption(cmd, "--text", f.text, f.text_note);
  if (f.tokens) in.tokens = AddOption(cmd, "--tokens", f.tokens, f.tokens_note);
  if (f.no_bos) AddFlag(cmd, "--no-bos", f.no_bos);
  return in;
}

// ---- Samples and sink metrics

CLI::Option* AddSeedOption(CLI::App* cmd, std::function<void(uint64_t)> set, std::string_view note,
                           const std::string& default_value, OptionGroup heading) {
  const OptionSpec& spec = FindOption("--seed");
  CLI::Option* option = cmd->add_option_function<std::string>(
      spec.names, [set](const std::string& text) { set(ParseSeed("--seed", text)); },
      OptionHelp(spec, cmd->get_name(), note));
  option->group(OptionGroupName(heading));
  if (!default_value.empty()) option->default_str(default_value);
  return option;
}

void SampleOptions::Add(CLI::App* cmd, int default_samples, bool prompt_and_tokens) {
  samples = default_samples;
  const char* windows =
      "random windows are cut from it (default: the shipped data/default_text.txt)";
  InputFlags flags;
  flags.text = &text_file;
  flags.text_note = windows;
  if (prompt_and_tokens) {
    flags.prompt = &prompt;
    flags.prompt_note = "one sample, the whole text";
    flags.tokens = &tokens_file;
    flags.tokens_note = "random windows are cut from them";
  }
  const InputOptions in = AddInputOptions(cmd, flags);
  prompt_option = in.prompt;
  if (prompt_and_tokens) {
    in.text->excludes(in.prompt)->excludes(in.tokens);
    in.prompt->excludes(in.tokens);
  }
  AddOption(cmd, "--tokenizer", &tokenizer);
  AddOption(cmd, "--samples", &samples);
  AddOption(cmd, "--length", &length);
  AddSeedOption(
      cmd, [this](uint64_t v) { seed = v; }, "for the windows and random first tokens",
      std::to_string(seed), OptionGroup::kSamples);
}

void SinkOptions::Add(CLI::App* cmd, bool with_first_k) {
  AddOption(cmd, "--eps", &eps);
  if (with_first_k) AddOption(cmd, "--first-k", &first_k);
}

void LayerThresholdOptions::Add(CLI::App* cmd) {
  AddOption(cmd, "--onset-threshold", &onset);
  AddOption(cmd, "--amplification-threshold", &amplification);
}

void ConditionOptions::Add(CLI::App* cmd, const std::string& default_list, std::string_view note) {
  list = default_list;
  AddOption(cmd, "--conditions", &list, note);
}

// ---- Sampling

void SamplingOptions::Add(CLI::App* cmd, float default_temperature) {
  temperature = default_temperature;
  AddOption(cmd, "--temperature", &temperature);
  AddOption(cmd, "--top-p", &top_p);
}

// ---- KV cache

void KvCacheFlags::Add(CLI::App* cmd) {
  AddOption(cmd, "--kv-type", &type);
  AddOption(cmd, "--kv-type-k", &type_k);
  AddOption(cmd, "--kv-type-v", &type_v);
  AddOption(cmd, "--kv-keep", &keep);
}

void CacheOptions::Add(CLI::App* cmd, std::string_view policy_note, std::string_view force_note) {
  AddOption(cmd, "--policy", &policy, policy_note);
  AddOption(cmd, "--sinks", &sinks);
  AddOption(cmd, "--window", &window);
  AddFlag(cmd, "--force", &force, force_note);
  kv.Add(cmd);
}

stream::StreamOptions CacheOptions::Options(const std::string& name,
                                            const std::string& flag) const {
  stream::StreamOptions o;
  o.policy = stream::ParsePolicy(name, flag);
  o.sinks = sinks;
  o.window = window;
  o.force = force;
  return o;
}

// ---- Output

void OutputOptions::Add(CLI::App* cmd, bool with_html, std::string_view json_note,
                        std::string_view html_note) {
  AddOption(cmd, "--json", &json, json_note);
  if (with_html) AddOption(cmd, "--html", &html, html_note);
}

// ---- Runtime

void AddRuntimeOptions(CLI::App& app) {
  const OptionSpec& spec = FindOption("--threads");
  for (CLI::App* verb : app.get_subcommands([](CLI::App*) { return true; })) {
    if (verb->get_option_no_throw("--threads")) continue;  // train's, a config key
    verb->add_option_function<int64_t>(
            spec.names, [](int64_t n) { SetThreadCountChecked("--threads", n); },
            OptionHelp(spec, verb->get_name()))
        ->group(OptionGroupName(spec.group));
  }
}

// The text of a number as --help promises it: decimal digits, a '-' in front where the value may
// be negative, a fraction and exponent for reals; nothing else. CLI11 reads integers with
// strtoll(..., 0) (so "010" would be 8 and "0x10" 16) and skips leading spaces (" 5" was 5 but
// "5 " an error): hex, octal prefixes and spaces are refused here, and an integer's leading zeros
// are dropped before CLI11 converts, so "010" is 10.
std::string CheckDecimal(const std::string& text, bool integer, bool is_unsigned) {
  // inf and nan reach the ranges, which refuse them by name (CheckReal).
  if (!integer && (text == "inf" || text == "-inf" || text == "nan")) return {};
  bool ok = !text.empty(), digit = false;
  for (size_t i = 0; ok && i < text.size(); ++i) {
    const char c = text[i];
    if (c >= '0' && c <= '9')
      digit = true;
    else if (c == '-' || c == '+')
      ok = (i == 0 && !is_unsigned) || (!integer && i > 0 && (text[i - 1] | 0x20) == 'e');
    else  // strtod judges the arrangement of the rest; no hex, spaces or words get past here
      ok = !integer && (c == '.' || c == 'e' || c == 'E');
  }
  if (ok && digit) return {};
  return fmt::format(
      "expected {}, got '{}'",
      integer ? (is_unsigned ? "a decimal integer >= 0" : "a decimal integer") : "a decimal number",
      PrintableExcerpt(text, 40));
}

// "010" -> "10", "-007" -> "-7", "000" -> "0": the decimal value CLI11's strtoll(..., 0) then
// reads.
std::string WithoutLeadingZeros(const std::string& text) {
  const size_t sign = text[0] == '-' || text[0] == '+' ? 1 : 0;
  size_t first = sign;
  while (first + 1 < text.size() && text[first] == '0') ++first;
  return text.substr(0, sign) + text.substr(first);
}

void RequireWellFormedValues(CLI::App& app) {
  std::vector<CLI::App*> apps = {&app};
  for (size_t i = 0; i < apps.size(); ++i)
    for (CLI::App* sub : apps[i]->get_subcommands([](CLI::App*) { return true; }))
      apps.push_back(sub);
  for (CLI::App* a : apps)
    for (CLI::Option* opt : a->get_options()) {
      // CLI11 appends a validator's description ("INT:INT in [0 - 65535]"): the type is the
      // first word.
      const std::string full = opt->get_type_name();
      const std::string type = full.substr(0, full.find(':'));
      const bool is_int = type == "INT", is_uint = type == "UINT", is_real = type == "FLOAT";
      // An empty value is refused by name, never read as "not given" (`--json ""` writing
      // nothing, `--kv-type-k ""` keeping --kv-type). --prompt says why itself ("the prompt is
      // empty"); chat's --identity "" is a system message without its first line.
      if (type == "TEXT" && !opt->check_name("--prompt") && !opt->check_name("--identity")) {
        opt->check(CLI::Validator(
            [](std::string& text) {
              return text.empty() ? std::string("expected a value, got an empty string")
                                  : std::string();
            },
            /*validator_desc=*/""));
        continue;
      }
      if (!is_int && !is_uint && !is_real) continue;
      // A transform runs before the option's other validators (a Range reads the value too).
      opt->transform(CLI::Validator(
          [is_int, is_uint](std::string& text) {
            std::string error = CheckDecimal(text, is_int || is_uint, is_uint);
            if (error.empty() && (is_int || is_uint)) text = WithoutLeadingZeros(text);
            return error;
          },
          /*validator_desc=*/""));
    }
}

}  // namespace ss::cli
