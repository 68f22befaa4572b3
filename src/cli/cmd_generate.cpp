// sinkscope generate: sample a continuation. stdout holds only the decoded text (prompt, then the
// continuation, streamed as produced); logs go to stderr. The KV cache is --policy's, by default
// the sinks cache that chat and stream keep (cli/options.h CacheOptions); --policy dense with an
// f32 cache runs model/generate.h, up to the model's context.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/options.h"
#include "cli/verbs.h"
#include "model/generate.h"
#include "model/sampler.h"
#include "stream/stream.h"

namespace ss::cli {

namespace {

// The decode rate two ways: over the whole call (the prompt's prefill and the first token, whose
// forward also pays the first touch of every mapped weight page, included), and from the first
// generated token on, the steady rate (as llama2.c's run.c reports its "achieved tok/s": the
// tokens after the first over the time since it).
class DecodeClock {
 public:
  void Token() {
    if (++tokens_ == 1) first_ = std::chrono::steady_clock::now();
  }
  // n: the tokens the call reports generated (a stop token it was shown is not among them).
  std::string Rates(int64_t n) const {
    const auto now = std::chrono::steady_clock::now();
    const double all = std::chrono::duration<double>(now - start_).count();
    std::string s = fmt::format("generated {} tokens in {:.3f} s ({:.1f} tokens/s", n, all,
                                n / std::max(all, 1e-9));
    if (tokens_ > 1) {
      const double steady = std::chrono::duration<double>(now - first_).count();
      s += fmt::format("; {:.1f} tokens/s after the first", (tokens_ - 1) / std::max(steady, 1e-9));
    }
    return s + ")";
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), first_;
  int64_t tokens_ = 0;
};

}  // namespace

void RegisterGenerate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate text from a prompt");
  struct Args {
    ModelOptions model;
    std::string prompt;
    bool no_bos = false;
    int steps = 256;
    SamplingOptions sampling;
    uint64_t seed = 0;
    CacheOptions cache;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--steps", a->steps, "Total tokens, prompt included, as llama2.c's -n")
      ->capture_default_str();
  a->model.Add(cmd, /*with_precision=*/true, GgmlActivations::kInt8);
  InputFlags input;
  input.prompt = &a->prompt;
  input.prompt_note = "the prompt to continue (default: empty, start from BOS)";
  input.no_bos = &a->no_bos;
  AddInputOptions(cmd, input);
  a->sampling.Add(cmd, /*default_temperature=*/1.0f);
  AddSeedOption(
      cmd, [a](uint64_t v) { a->seed = v; }, "for sampling (default: time)", "",
      OptionGroup::kSampling);
  a->cache.Add(cmd,
               "generate's default was dense before: --policy dense runs the full cache, up to the "
               "context and no further");
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
    opt.sampler.seed =
        a->seed
            ? a->seed
            : static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    std::string head = tok.Decode(prompt);
    std::fwrite(head.data(), 1, head.size(), stdout);
    std::fflush(stdout);
    DecodeClock clock;
    if (a->cache.policy != "dense" || a->cache.kv.typed()) {
      // Streaming generation: --steps is not capped by the context (but for dense). A typed cache
      // (--kv-type) runs here for every policy.
      stream::StreamOptions so = a->cache.Options(a->cache.policy, "--policy");
      a->cache.kv.Apply(m.model, prompt, &so);
      auto cache = stream::MakeStreamCache(m.model, so);
      Sampler sampler(opt.sampler);
      const ModelConfig& c = m.model.config;
      int prev = prompt.back();
      const int64_t n = stream::StreamGenerate(
          *cache, prompt, std::max<int64_t>(0, static_cast<int64_t>(a->steps) - prompt.size()),
          [&](const float* logits) { return sampler.Sample(logits, c.vocab_size); },
          [&](int token) {
            clock.Token();
            if (opt.stop_at_bos_eos && (token == c.bos_id || token == c.eos_id)) return false;
            std::string piece = tok.DecodeToken(prev, token);
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            prev = token;
            return true;
          });
      std::fputc('\n', stdout);
      std::fflush(stdout);
      Log(fmt::format("{} with the {} cache ({} keys, {} values), {} entries, {:.1f} KiB",
                      clock.Rates(n), a->cache.policy, KvTypeName(so.k_type), KvTypeName(so.v_type),
                      cache->budget(), cache->peak_kv_bytes() / 1024.0));
      return;
    }
    std::vector<int> out = Generate(m.model, prompt, opt, [&](int prev, int token) {
      clock.Token();
      std::string piece = tok.DecodeToken(prev, token);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    });
    std::fputc('\n', stdout);
    std::fflush(stdout);
    Log(clock.Rates(static_cast<int64_t>(out.size())));
  });
}

}  // namespace ss::cli
