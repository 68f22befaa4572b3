// Cost of a full `sinkscope explain` on a random-weight model shaped like GPT-2 small (12 layers,
// 12 heads, width 768, MLP 3072; Llama family, ungated GELU MLP, vocabulary 50257 but no logits are
// computed). A plain program, not a ctest:
//   build/bench/bench_explain [--samples 32] [--length 256] [--intervention-samples 8] [--resume 1|0]
//                             [--bf16 0|1] [--mode both|fast|exhaustive] [--verify-top 16]
// --bf16 1: the model's products in bf16 (--precision bf16). --mode both (the default) runs the
// exhaustive intervention table (every row measured: the cost before issue 33) and the fast path
// (every row estimated by recomputing position 0, the best --verify-top measured) one after the
// other on the same samples, prints both and their ratio, and checks that every row the fast path
// measured equals the exhaustive measurement bit for bit.
// Prints the wall time of the clean pass (N forwards with every observer) and of the whole explain
// (clean pass, interventions, search), the number of forwards, block evaluations and position-0
// recomputations. A random model has no sink, so the greedy search does not run.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "explain/explain.h"
#include "model/precision.h"
#include "../tests/random_model.h"

namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Timed {
  ss::explain::ExplainResult result;
  double seconds = 0;
};

Timed Run(const ss::Model& model, const std::vector<std::vector<int>>& data,
          const ss::explain::ExplainOptions& o, const char* label) {
  const auto t0 = std::chrono::steady_clock::now();
  Timed t{ss::explain::Explain(model, data, o), 0};
  t.seconds = Seconds(t0);
  const auto& r = t.result;
  const int L = r.n_layers;
  std::printf("%s: verdict %s; %lld forwards, %lld block evaluations (%.0f%% of full forwards), "
              "%lld position-0 recomputations (%lld one-token block evaluations) in %.1f s\n",
              label, r.verdict.c_str(), static_cast<long long>(r.forward_passes),
              static_cast<long long>(r.block_evaluations),
              100.0 * r.block_evaluations / (r.forward_passes * L),
              static_cast<long long>(r.estimates.recompute_calls),
              static_cast<long long>(r.estimates.recompute_rows), t.seconds);
  std::printf("  clean pass %.1f s (%.3f s per sample), interventions %.1f s (of which estimates %.1f s), "
              "search %.1f s; %d of %d rows measured\n",
              r.clean_seconds, r.clean_seconds / r.samples, r.intervention_seconds, r.estimate_seconds,
              r.search_seconds, r.estimates.verified, r.estimates.candidates);
  std::printf("  Spearman estimate vs measured over the measured rows: target share %.3f, alpha_0 "
              "share %.3f, P0 norm ratio after %.3f\n",
              r.estimates.spearman_target, r.estimates.spearman_alpha0,
              r.estimates.spearman_norm_ratio);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int samples = 32, length = 256, intervention_samples = 8, verify_top = 16;
  bool resume = true, bf16 = false;
  std::string mode = "both";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (flag == "--samples") samples = v;
    else if (flag == "--length") length = v;
    else if (flag == "--intervention-samples") intervention_samples = v;
    else if (flag == "--resume") resume = v != 0;
    else if (flag == "--bf16") bf16 = v != 0;
    else if (flag == "--verify-top") verify_top = v;
    else if (flag == "--mode" && (std::strcmp(argv[i + 1], "both") == 0 ||
                                  std::strcmp(argv[i + 1], "fast") == 0 ||
                                  std::strcmp(argv[i + 1], "exhaustive") == 0))
      mode = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag or value %s %s\n", argv[i], argv[i + 1]);
      return 2;
    }
  }
  ss::test::RandomModelShape shape;
  shape.n_layers = 12;
  shape.n_heads = 12;
  shape.n_kv_heads = 12;
  shape.dim = 768;
  shape.hidden_dim = 3072;
  shape.vocab_size = 50257;
  ss::Model model = ss::test::RandomLlama(shape);
  model.config.gated_mlp = false;
  model.config.act = ss::ActKind::kGelu;
  if (bf16) ss::SetPrecision(model, ss::Precision::kBf16);
  std::vector<std::vector<int>> data(samples, std::vector<int>(length));
  uint64_t x = 1;
  for (auto& s : data) {
    for (int& t : s) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      t = 3 + static_cast<int>((x >> 33) % (shape.vocab_size - 3));
    }
    s[0] = 1;
  }
  std::printf("GPT-2-small-shaped random model, N = %d samples, T = %d, interventions on %d samples\n",
              samples, length, std::min(samples, intervention_samples));
  std::printf("resume at the intervened block: %s; precision %s; verify_top %d\n",
              resume ? "yes" : "no (every forward from the embedding)", bf16 ? "bf16" : "f32",
              verify_top);
  ss::explain::ExplainOptions o;
  o.intervention_samples = intervention_samples;
  o.resume_at_block = resume;
  o.verify_top = verify_top;
  Timed old_run, new_run;
  if (mode != "fast") {
    ss::explain::ExplainOptions all = o;
    all.exhaustive = true;
    old_run = Run(model, data, all, "exhaustive (every row measured)");
  }
  if (mode != "exhaustive") new_run = Run(model, data, o, "fast (estimates, best verify_top measured)");
  if (mode != "both") return 0;
  const auto &a = old_run.result, &b = new_run.result;
  int differing = 0;
  for (size_t i = 0; i < b.interventions.size(); ++i) {
    const auto &x = b.interventions[i], &y = a.interventions[i];
    if (x.measured && (x.sink_after != y.sink_after || x.norm_ratio_after != y.norm_ratio_after ||
                       x.layer_sink_after != y.layer_sink_after))
      ++differing;
  }
  const double old_iv = a.intervention_seconds + a.search_seconds;
  const double new_iv = b.intervention_seconds + b.search_seconds;
  std::printf("side by side: forwards %lld -> %lld (%.1fx fewer), block evaluations %lld -> %lld "
              "(+ %lld one-token), wall %.1f s -> %.1f s (%.2fx), interventions and search %.1f s -> "
              "%.1f s (%.2fx)\n",
              static_cast<long long>(a.forward_passes), static_cast<long long>(b.forward_passes),
              static_cast<double>(a.forward_passes) / b.forward_passes,
              static_cast<long long>(a.block_evaluations), static_cast<long long>(b.block_evaluations),
              static_cast<long long>(b.estimates.recompute_rows), old_run.seconds, new_run.seconds,
              old_run.seconds / new_run.seconds, old_iv, new_iv, old_iv / new_iv);
  std::printf("verdicts %s / %s; measured rows differing from the exhaustive run: %d of %d\n",
              a.verdict.c_str(), b.verdict.c_str(), differing, b.estimates.verified);
  return differing == 0 && a.verdict == b.verdict ? 0 : 1;
}
