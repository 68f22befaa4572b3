// sinkscope generate: sample a continuation. stdout holds only the decoded text (prompt, then the
// continuation, streamed as produced); logs go to stderr.
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/verbs.h"
#include "model/generate.h"
#include "model/sampler.h"
#include "stream/stream.h"

namespace ss::cli {

void RegisterGenerate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate text from a prompt");
  struct Args {
    ModelOptions model;
    std::string prompt;
    bool no_bos = false;
    int steps = 256;
    SamplingOptions sampling;
    uint64_t seed = 0;
    std::string policy = "dense";
    KvCacheFlags kv;
    int sinks = 4, window = 252;
    bool force = false;
  };
  auto a = std::make_shared<Args>();
  a->model.Add(cmd);
  AddPrecisionOption(cmd, &a->model.precision);
  cmd->add_option("--prompt", a->prompt, "Prompt text (default: empty, start from BOS)");
  cmd->add_flag("--no-bos", a->no_bos, "Do not put BOS before the prompt");
  cmd->add_option("--steps", a->steps,
                  "Total tokens, prompt included, as llama2.c's -n (default 256)");
  a->sampling.Add(cmd, /*default_temperature=*/1.0f);
  AddSeedOption(cmd, [a](uint64_t v) { a->seed = v; }, "Random seed (default: time)", "");
  cmd->add_option("--policy", a->policy,
                  "KV cache: dense (default, up to the context) or sinks | window | recompute, "
                  "which run past the context in constant memory (docs/STREAMING.md)");
  cmd->add_option("--sinks", a->sinks, "Sink tokens kept with --policy sinks (default 4)");
  cmd->add_option("--window", a->window, "Recent tokens kept with a streaming policy (default 252)");
  cmd->add_flag("--force", a->force, "Allow --sinks + --window beyond the model's context");
  a->kv.Add(cmd);
  cmd->callback([a] {
    // Checked here rather than with CLI11's Range, which lets NaN through.
    CheckInt("--steps", a->steps, 1, 1 << 30);
    a->sampling.Validate();
    LoadedModel m = a->model.Load();
    const Tokenizer& tok = *m.tokenizer;
    std::vector<int> prompt = tok.Encode(a->prompt, !a->no_bos);
    if (prompt.empty()) Fail("--prompt is empty and --no-bos leaves nothing to start from");
    GenerateOptions opt;
    opt.steps = a->steps;
    opt.sampler.temperature = a->sampling.temperature;
    opt.sampler.top_p = a->sampling.top_p;
    opt.sampler.seed = a->seed ? a->seed
                               : static_cast<uint64_t>(
                                     std::chrono::system_clock::now().time_since_epoch().count());
    std::string head = tok.Decode(prompt);
    std::fwrite(head.data(), 1, head.size(), stdout);
    std::fflush(stdout);
    auto start = std::chrono::steady_clock::now();
    if (a->policy != "dense" || a->kv.typed()) {
      // Streaming generation: --steps is not capped by the context (but for dense). A typed cache
      // (--kv-type) runs here for every policy.
      stream::StreamOptions so;
      so.policy = stream::ParsePolicy(a->policy, "--policy");
      so.sinks = a->sinks;
      so.window = a->window;
      so.force = a->force;
      a->kv.Apply(m.model, prompt, &so);
      auto cache = stream::MakeStreamCache(m.model, so);
      Sampler sampler(opt.sampler);
      const ModelConfig& c = m.model.config;
      int prev = prompt.back();
      const int64_t n = stream::StreamGenerate(
          *cache, prompt, std::max<int64_t>(0, static_cast<int64_t>(a->steps) - prompt.size()),
          [&](const float* logits) { return sampler.Sample(logits, c.vocab_size); },
          [&](int token) {
            if (opt.stop_at_bos_eos && (token == c.bos_id || token == c.eos_id)) return false;
            std::string piece = tok.DecodeToken(prev, token);
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            prev = token;
            return true;
          });
      std::fputc('\n', stdout);
      std::fflush(stdout);
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      Log(fmt::format("generated {} tokens in {:.3f} s ({:.1f} tokens/s) with the {} cache ({} keys, {} "
                      "values), {} entries, {:.1f} KiB",
                      n, seconds, n / std::max(seconds, 1e-9), a->policy, KvTypeName(so.k_type),
                      KvTypeName(so.v_type), cache->budget(), cache->peak_kv_bytes() / 1024.0));
      return;
    }
    std::vector<int> out = Generate(m.model, prompt, opt, [&](int prev, int token) {
      std::string piece = tok.DecodeToken(prev, token);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    });
    std::fputc('\n', stdout);
    std::fflush(stdout);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Log(fmt::format("generated {} tokens in {:.3f} s ({:.1f} tokens/s)", out.size(), seconds,
                    out.size() / std::max(seconds, 1e-9)));
  });
}

}  // namespace ss::cli
