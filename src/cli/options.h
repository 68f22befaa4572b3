// The command line's one option table: every flag that more than one verb takes is declared here
// once, with its help, its default and its domain, under the heading of its group in --help. A verb
// lists the groups it takes (cmd_<verb>.cpp: ModelOptions::Add, CacheOptions::Add, ...) and may
// add a note on what the flag means for it after the table's help ("; the text to score"); it
// never re-declares a table flag by hand. Flags one verb alone has stay in its file.
//
// Domains: a flag whose value CLI11 can check completely is checked by CLI11 (a number that is no
// number); every range is checked by the group's Validate (common.h: CheckReal, CheckInt, with the
// message "--eps: expected a threshold in (0, 1], got nan") or by the library that parses the value
// (stream::ParsePolicy, ParseKvType, ParsePrecision, ParseSeed), so that the Python module and
// serve, which set the same structures without flags, get the same checks and messages.
// Defaults: the structures' member initialisers (and stream::StreamOptions's for the cache), which
// the table shows and the Python module and serve use too.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/common.h"
#include "cli/verbs.h"
#include "stream/stream.h"

namespace ss::cli {

// The groups, in the order their headings come in --help (after the verb's own "Options").
enum class OptionGroup {
  kModel,     // --model, --tokenizer, --precision
  kInput,     // --prompt, --text, --tokens, --no-bos
  kSamples,   // analyze, explain, trace: --samples, --length, --seed, --conditions
  kSinks,     // analyze, explain, trace: --eps, --first-k, --onset-threshold, ...
  kSampling,  // generate, chat: --temperature, --top-p, --seed
  kCache,     // generate, chat, stream: --policy, --sinks, --window, --force, --kv-*
  kOutput,    // --json, --html
  kRuntime,   // every verb: --threads
  kVerb,  // the verb's own flags ("Options"), for a table flag placed among them (train's --seed)
};
const char* OptionGroupName(OptionGroup group);  // the heading: "Model", "Cache", ...

struct OptionSpec {
  std::string names;  // as CLI11 takes them: "--onset-threshold,--onset-rate"
  OptionGroup group;
  std::string help;           // "{verb}" stands for the verb's name
  std::string default_text;   // as --help shows it; empty: none, or the verb's own (verb_default)
  bool verb_default = false;  // each verb sets its default (--samples, --temperature, --seed, ...)
  bool is_flag = false;       // takes no value

  OptionSpec(std::string names_, OptionGroup group_, std::string help_,
             std::string default_text_ = {}, bool verb_default_ = false, bool is_flag_ = false)
      : names(std::move(names_)),
        group(group_),
        help(std::move(help_)),
        default_text(std::move(default_text_)),
        verb_default(verb_default_),
        is_flag(is_flag_) {}
};

// The table, in group order.
const std::vector<OptionSpec>& OptionTable();
// The entry of `name` (any of its names, "--onset-rate" too); std::logic_error if none: a verb
// asking for a flag the table lacks is a programming error.
const OptionSpec& FindOption(std::string_view name);
// The help a verb shows: the table's, with {verb} filled in, then "; " and the verb's note if any.
std::string OptionHelp(const OptionSpec& spec, std::string_view verb, std::string_view note = {});

// A name a verb gives its own meaning, beside the table's: train's flags are overrides of its
// config's keys, with the config's domains (docs/TRAINING.md), and convert's --force replaces an
// output file. Nothing else may re-use a table name; tests/test_options.cpp holds every verb to it.
struct OwnMeaning {
  const char* verb;
  const char* name;
  const char* why;
};
const std::vector<OwnMeaning>& OwnMeanings();

// Declares the table's flag `name` on `cmd`, bound to `value`, with the verb's `note` (after the
// table's help); a verb_default entry shows the value `value` holds. `heading` overrides the
// entry's group heading (--seed sits under Samples in analyze and under Sampling in generate).
CLI::Option* AddOption(CLI::App* cmd, std::string_view name, std::string* value,
                       std::string_view note = {});
CLI::Option* AddOption(CLI::App* cmd, std::string_view name, int* value,
                       std::string_view note = {});
CLI::Option* AddOption(CLI::App* cmd, std::string_view name, double* value,
                       std::string_view note = {});
CLI::Option* AddOption(CLI::App* cmd, std::string_view name, float* value,
                       std::string_view note = {});
CLI::Option* AddFlag(CLI::App* cmd, std::string_view name, bool* value, std::string_view note = {});

// Model: --model (required), --tokenizer, --precision with --activations (by_default: the verb's
// default for the latter); null pointers are not taken. (ModelOptions::Add declares the same
// through this.)
void AddModelOptions(CLI::App* cmd, std::string* model, std::string* tokenizer,
                     std::string* precision, GgmlActivations by_default = GgmlActivations::kF32);
// --precision and --activations alone (trace, which reads --checkpoints, not --model).
CLI::Option* AddPrecisionOption(CLI::App* cmd, std::string* precision,
                                GgmlActivations by_default = GgmlActivations::kF32);

// --seed: a decimal integer in [0, 2^64 - 1], read as text, since CLI11 would wrap "-1" into a
// uint64 as 18446744073709551615 (ParseSeed). `set` receives the value; `default_value` is shown in
// --help ("" for none); `note` says what it seeds in this verb.
CLI::Option* AddSeedOption(CLI::App* cmd, std::function<void(uint64_t)> set, std::string_view note,
                           const std::string& default_value, OptionGroup heading);

// The input flags a verb reads (each with the verb's note on its role): pointers left null are
// not taken.
struct InputFlags {
  std::string* prompt = nullptr;
  std::string_view prompt_note;
  std::string* text = nullptr;
  std::string_view text_note;
  std::string* tokens = nullptr;
  std::string_view tokens_note;
  bool* no_bos = nullptr;
};
struct InputOptions {
  CLI::Option *prompt = nullptr, *text = nullptr, *tokens = nullptr;  // null where not taken
};
InputOptions AddInputOptions(CLI::App* cmd, const InputFlags& flags);

// Cache: the KV cache of generate, chat and stream. One default for all three: the sinks policy,
// S = 4, W = 252 (StreamingLLM's "4+252"; stream::StreamOptions). generate ran a dense cache by
// default before; --policy dense keeps that.
struct CacheOptions {
  std::string policy = stream::PolicyName(stream::StreamOptions{}.policy);
  int sinks = stream::StreamOptions{}.sinks;
  int window = stream::StreamOptions{}.window;
  bool force = false;
  KvCacheFlags kv;
  // `force_note`: what --force also allows in this verb (stream: a dense cache past the context).
  void Add(CLI::App* cmd, std::string_view policy_note = {}, std::string_view force_note = {});
  // The options the flags name for `policy` (checked by stream::ParsePolicy with `flag`), before
  // the cache types are applied (KvCacheFlags::Apply).
  stream::StreamOptions Options(const std::string& policy, const std::string& flag) const;
};

// Output: the reports written besides the terminal's (each verb renders its own document).
struct OutputOptions {
  std::string json, html;
  // `html` false: the verb writes no HTML page. The notes say what the documents hold.
  void Add(CLI::App* cmd, bool html, std::string_view json_note = {},
           std::string_view html_note = {});
};

// Runtime: --threads on every verb of `app` that has none of its own (train's is a config key),
// sizing one OpenMP pool for our kernels and OpenBLAS before the verb runs.
void AddRuntimeOptions(CLI::App& app);

// Every numeric option of `app` and its verbs (integers and reals, the table's and each verb's
// own) takes decimal text only: "010" is 10, never octal 8; no hex "0x10", no spaces; every text
// option refuses an empty value (but --prompt, which says so itself, and chat's --identity). Called
// once every verb is registered. CheckDecimal is the number test: empty when `text` is such a
// number, else the message.
void RequireWellFormedValues(CLI::App& app);
std::string CheckDecimal(const std::string& text, bool integer, bool is_unsigned);

}  // namespace ss::cli
