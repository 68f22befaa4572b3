// sinkscope chat: an interactive multi-turn loop over one attention-sink cache (StreamingLLM), so a
// conversation can go on past the model's context in constant memory. Each line read from stdin is
// one turn; the reply is streamed to stdout token by token; how full the cache is goes to stderr.
// End of input ends the session (exit 0).
//
// Turns are plain text (stories260K has no chat format), or for gpt-oss its harmony format
// (tokenizer/harmony.h): the first turn is preceded by the system message (and a developer message
// with --developer), each line becomes "<|start|>user<|message|>{line}<|end|><|start|>assistant",
// and the model writes its messages; the final channel's text is the reply (the analysis channel
// goes to stderr with --show-analysis only: the format asks not to show it to users). The stop
// token (<|return|>, <|call|>, or the <|end|> of the final message) is not fed; the next turn
// starts with <|end|> in its place, as the format keeps a reply in the history. The cache keeps
// what it was fed, the analysis included (the format drops earlier analysis when it re-renders a
// whole conversation; a cache kept across turns cannot, and a sink cache drops the oldest tokens
// anyway).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/options.h"
#include "cli/verbs.h"
#include "io/load.h"
#include "model/sampler.h"
#include "stream/stream.h"
#include "tokenizer/find.h"
#include "tokenizer/harmony.h"
#include "tokenizer/tokenizer.h"

namespace ss::cli {

namespace {

struct ChatArgs {
  std::string model, tokenizer, precision;
  // harmony (gpt-oss) messages
  std::string format = "auto",
              identity = "You are ChatGPT, a large language model trained by OpenAI.";
  std::string reasoning = "medium", developer, date;
  bool show_analysis = false, log_tokens = false;
  int max_reply = 256;
  SamplingOptions sampling;
  uint64_t seed = 42;
  CacheOptions cache;
};

void RunChat(const ChatArgs& a) {
  if (a.max_reply < 1) Fail("--max-reply: expected at least 1 token, got {}", a.max_reply);
  a.sampling.Validate();
  stream::StreamOptions o = a.cache.Options(a.cache.policy, "--policy");
  Model model = LoadModelAt(a.model, a.precision);
  stream::ValidateOptions(o, model.config);
  if (a.cache.kv.keep == "detected")
    Fail("--kv-keep detected: chat has no text to look at before the first turn; use first:N");
  a.cache.kv.Apply(model, {}, &o);
  auto tokenizer = FindTokenizer(model, a.tokenizer);
  const bool harmony =
      a.format == "harmony" || (a.format == "auto" && model.config.arch == "gpt_oss");
  HarmonyTokens special;
  if (harmony)
    special = HarmonyTokens::Find(*tokenizer, a.tokenizer.empty() ? a.model : a.tokenizer);
  auto cache = stream::MakeStreamCache(model, o);
  Sampler sampler(SamplerOptions{a.sampling.temperature, a.sampling.top_p, a.seed});
  const int V = model.config.vocab_size;
  const int bos = tokenizer->bos_id(), eos = tokenizer->eos_id();
  LogPending();
  Log(fmt::format(
      "chat: {} cache, {} + {} entries ({} keys, {} values){}; one turn per line, end of "
      "input (Ctrl-D) quits",
      stream::PolicyName(o.policy), o.sinks, o.window, KvTypeName(o.k_type), KvTypeName(o.v_type),
      harmony ? fmt::format("; harmony messages (reasoning {})", a.reasoning) : ""));
  std::string line;
  int prev = -1;
  int turn = 0;
  bool close_reply =
      false;  // harmony: the last reply's stop token was not fed; <|end|> stands for it
  while (std::getline(std::cin, line)) {
    ++turn;
    std::vector<int> prompt;
    try {
      if (harmony) {
        std::vector<HarmonyMessage> messages;
        if (cache->tokens_seen() == 0) {
          messages.push_back(
              {"system", "", HarmonySystemContent(a.identity, "2024-06", a.date, a.reasoning)});
          if (!a.developer.empty())
            messages.push_back({"developer", "", HarmonyDeveloperContent(a.developer)});
        }
        messages.push_back({"user", "", line});
        if (close_reply) prompt.push_back(special.end);
        const std::vector<int> rest =
            RenderHarmony(*tokenizer, special, messages, /*open_assistant=*/true);
        prompt.insert(prompt.end(), rest.begin(), rest.end());
      } else if (!line.empty()) {
        prompt = tokenizer->Encode(line, /*add_bos=*/cache->tokens_seen() == 0 && bos >= 0);
      } else if (cache->tokens_seen() == 0) {
        if (bos < 0) continue;
        prompt = {bos};  // an empty first turn: let the model start from BOS
      }
    } catch (const Error& e) {
      // One bad line should not end the conversation.
      Log(fmt::format("chat: turn {}: {}; line skipped", turn, e.what()));
      continue;
    }
    if (a.log_tokens)
      Log(fmt::format("chat: turn {} prompt tokens: {}", turn, fmt::join(prompt, " ")));
    prev = prompt.empty() ? prev : prompt.back();
    auto pick = [&](const float* logits) { return sampler.Sample(logits, V); };
    HarmonyReplyParser parser(special);
    std::vector<int> reply;
    std::string shown_channel;  // the channel whose text stderr is showing (--show-analysis)
    auto emit = [&](int token) {
      if (a.log_tokens) reply.push_back(token);
      if (!harmony) {
        if (token == eos || token == bos) return false;  // end of the reply
        std::fputs(tokenizer->DecodeToken(prev, token).c_str(), stdout);
        std::fflush(stdout);
        prev = token;
        return true;
      }
      const std::string text = tokenizer->DecodeToken(prev, token);
      prev = token;
      const HarmonyReplyParser::Step step = parser.Feed(token, text);
      if (step.ends_reply) return false;
      // Message text only: the markers and any other special token (<|constrain|>, reserved ids)
      // are not printed.
      if (step.part != HarmonyReplyParser::Part::kContent ||
          tokenizer->SpecialTokenId(text) == token)
        return true;
      const std::string& channel = parser.channel();
      if (channel == "final" || channel.empty()) {
        std::fputs(text.c_str(), stdout);
        std::fflush(stdout);
      } else if (a.show_analysis) {
        if (channel != shown_channel) std::fprintf(stderr, "\n[%s] ", channel.c_str());
        shown_channel = channel;
        std::fputs(text.c_str(), stderr);
      }
      return true;
    };
    const int64_t n = stream::StreamGenerate(*cache, prompt, a.max_reply, pick, emit);
    close_reply = harmony;  // the reply is closed by <|end|> whether it stopped or ran out
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (!shown_channel.empty()) std::fputs("\n", stderr);
    if (a.log_tokens)
      Log(fmt::format("chat: turn {} reply tokens: {}", turn, fmt::join(reply, " ")));
    if (harmony && parser.stop_token() == special.call)
      Log(fmt::format("chat: turn {}: the model called a tool (<|call|>); chat runs no tools",
                      turn));
    Log(fmt::format("[cache {}/{} entries, {} tokens seen, {} generated, {:.1f} KiB KV]",
                    std::min<int64_t>(cache->tokens_seen(), cache->budget()), cache->budget(),
                    cache->tokens_seen(), n, cache->kv_bytes() / 1024.0));
  }
  Log(fmt::format("chat: end of input after {} turn(s)", turn));
}

}  // namespace

void RegisterChat(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "chat",
      "Interactive multi-turn generation over one attention-sink cache (runs indefinitely)");
  auto a = std::make_shared<ChatArgs>();
  cmd->add_option("--max-reply", a->max_reply, "Most tokens per reply")->capture_default_str();
  cmd->add_option(
         "--format", a->format,
         "Turns as plain text, or as gpt-oss's harmony messages (auto: harmony for gpt_oss)")
      ->check(CLI::IsMember({"auto", "plain", "harmony"}))
      ->capture_default_str();
  cmd->add_option("--identity", a->identity, "harmony: the system message's first line")
      ->capture_default_str();
  cmd->add_option("--reasoning", a->reasoning,
                  "harmony: the reasoning effort the system message asks for")
      ->check(CLI::IsMember({"low", "medium", "high"}))
      ->capture_default_str();
  cmd->add_option("--date", a->date,
                  "harmony: the system message's current date (none if not given)");
  cmd->add_option("--developer", a->developer,
                  "harmony: instructions, sent as the developer message before the first turn");
  cmd->add_flag(
      "--show-analysis", a->show_analysis,
      "harmony: print the analysis and commentary channels to stderr (hidden by default)");
  cmd->add_flag("--log-tokens", a->log_tokens,
                "Log each turn's prompt and reply token ids (stderr)");
  AddModelOptions(cmd, &a->model, &a->tokenizer, &a->precision, GgmlActivations::kInt8);
  a->sampling.Add(cmd, /*default_temperature=*/0.8f);
  AddSeedOption(
      cmd, [a](uint64_t v) { a->seed = v; }, "for sampling", std::to_string(a->seed),
      OptionGroup::kSampling);
  a->cache.Add(cmd);
  cmd->callback([a] { RunChat(*a); });
}

}  // namespace ss::cli
