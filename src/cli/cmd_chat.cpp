// sinkscope chat: an interactive multi-turn loop over one attention-sink cache (StreamingLLM), so a
// conversation can go on past the model's context in constant memory. Each line read from stdin is
// one turn (plain text: stories260K has no chat template); the reply is streamed to stdout token by
// token; how full the cache is goes to stderr. End of input ends the session (exit 0).
#include <fmt/format.h>

#include <iostream>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/verbs.h"
#include "io/load.h"
#include "model/sampler.h"
#include "stream/stream.h"
#include "tokenizer/find.h"
#include "tokenizer/tokenizer.h"

namespace ss::cli {

namespace {

struct ChatArgs {
  std::string model, tokenizer, policy = "sinks", precision;
  int sinks = 4, window = 252, max_reply = 256;
  SamplingOptions sampling;
  uint64_t seed = 42;
  bool force = false;
  KvCacheFlags kv;
};

void RunChat(const ChatArgs& a) {
  if (a.max_reply < 1) Fail("--max-reply: expected at least 1 token, got {}", a.max_reply);
  a.sampling.Validate();
  stream::StreamOptions o;
  o.policy = stream::ParsePolicy(a.policy, "--policy");
  o.sinks = a.sinks;
  o.window = a.window;
  o.force = a.force;
  Model model = LoadModelAt(a.model, a.precision);
  stream::ValidateOptions(o, model.config);
  if (a.kv.keep == "detected")
    Fail("--kv-keep detected: chat has no text to look at before the first turn; use first:N");
  a.kv.Apply(model, {}, &o);
  auto tokenizer = FindTokenizer(model, a.tokenizer);
  auto cache = stream::MakeStreamCache(model, o);
  Sampler sampler(SamplerOptions{a.sampling.temperature, a.sampling.top_p, a.seed});
  const int V = model.config.vocab_size;
  const int bos = tokenizer->bos_id(), eos = tokenizer->eos_id();
  Log(fmt::format("chat: {} cache, {} + {} entries ({} keys, {} values); one turn per line, end of "
                  "input (Ctrl-D) quits",
                  stream::PolicyName(o.policy), o.sinks, o.window, KvTypeName(o.k_type), KvTypeName(o.v_type)));
  std::string line;
  int prev = -1;
  int turn = 0;
  while (std::getline(std::cin, line)) {
    ++turn;
    std::vector<int> prompt;
    if (!line.empty()) {
      try {
        prompt = tokenizer->Encode(line, /*add_bos=*/cache->tokens_seen() == 0 && bos >= 0);
      } catch (const Error& e) {
        // One bad line should not end the conversation.
        Log(fmt::format("chat: turn {}: {}; line skipped", turn, e.what()));
        continue;
      }
    } else if (cache->tokens_seen() == 0) {
      if (bos < 0) continue;
      prompt = {bos};  // an empty first turn: let the model start from BOS
    }
    prev = prompt.empty() ? prev : prompt.back();
    auto pick = [&](const float* logits) { return sampler.Sample(logits, V); };
    auto emit = [&](int token) {
      if (token == eos || token == bos) return false;  // end of the reply
      std::fputs(tokenizer->DecodeToken(prev, token).c_str(), stdout);
      std::fflush(stdout);
      prev = token;
      return true;
    };
    const int64_t n = stream::StreamGenerate(*cache, prompt, a.max_reply, pick, emit);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    Log(fmt::format("[cache {}/{} entries, {} tokens seen, {} generated, {:.1f} KiB KV]",
                    std::min<int64_t>(cache->tokens_seen(), cache->budget()), cache->budget(),
                    cache->tokens_seen(), n, cache->kv_bytes() / 1024.0));
  }
  Log(fmt::format("chat: end of input after {} turn(s)", turn));
}

}  // namespace

void RegisterChat(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "chat", "Interactive multi-turn generation over one attention-sink cache (runs indefinitely)");
  auto a = std::make_shared<ChatArgs>();
  cmd->add_option("--model", a->model, "Model file or directory")->required();
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer (default: found beside the model)");
  AddPrecisionOption(cmd, &a->precision);
  cmd->add_option("--policy", a->policy, "sinks | window | recompute | dense")->default_val("sinks");
  cmd->add_option("--sinks", a->sinks, "S initial tokens kept")->default_val(4);
  cmd->add_option("--window", a->window, "W most recent tokens kept")->default_val(252);
  cmd->add_option("--max-reply", a->max_reply, "Most tokens per reply")->default_val(256);
  a->kv.Add(cmd);
  a->sampling.Add(cmd, /*default_temperature=*/0.8f);
  AddSeedOption(cmd, [a](uint64_t v) { a->seed = v; }, "Sampling seed", std::to_string(a->seed));
  cmd->add_flag("--force", a->force, "Allow S + W beyond the model's context");
  cmd->callback([a] { RunChat(*a); });
}

}  // namespace ss::cli
