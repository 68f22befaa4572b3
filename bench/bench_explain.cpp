// Cost of a full `sinkscope explain`, the exhaustive intervention table (every row measured on
// every intervention sample: the cost before issue 33) against the default path (every row
// estimated by one sweep of position 0, the best --verify-top measured, intervention samples
// added until the verdict and circuit are settled), side by side in one run. A plain program,
// not a ctest:
//   build/bench/bench_explain [--model PATH] [--precision f32|bf16|q8_0|native] [--samples N]
//       [--length T] [--intervention-samples N] [--verify-top K] [--resume 1|0]
//       [--mode both|fast|exhaustive|fast-all] [--first-token ID]
// Without --model: a random-weight model shaped like GPT-2 small (12 layers, 12 heads, width 768,
// MLP 3072; Llama family, ungated GELU MLP, vocabulary 50257, no logits computed), samples of
// random token ids with BOS first, and the defaults --samples 32 --length 256
// --intervention-samples 8 (the figures docs/EXPLAIN.md gives since the first benchmark). With
// --model: that model (its own BOS id first, or --first-token), random ids of its vocabulary, and
// explain's own defaults (--samples 16 --length 64 --intervention-samples 8).
// --mode both (the default) runs the exhaustive table with early stopping off (today's cost) and
// then the default path; fast-all is the default path without early stopping. Prints each run's
// wall time per phase, forwards, block evaluations and position-0 sweeps, the ratio, and checks
// that both reach the same verdict and circuit and that every row the default path measured
// equals the exhaustive measurement on the same samples.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../tests/random_model.h"
#include "explain/explain.h"
#include "io/load.h"
#include "kernels/parallel.h"
#include "model/precision.h"

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
  std::string circuit;
  for (const auto& c : r.circuit.components) circuit += (circuit.empty() ? "" : ",") + c.Name();
  std::printf(
      "%s: verdict %s%s%s%s; %lld forwards, %lld block evaluations (%.0f%% of full forwards), "
      "%lld position-0 sweep calls (%lld one-token block evaluations) in %.1f s\n",
      label, r.verdict.c_str(), circuit.empty() ? "" : " {", circuit.c_str(),
      circuit.empty() ? "" : "}", static_cast<long long>(r.forward_passes),
      static_cast<long long>(r.block_evaluations),
      100.0 * r.block_evaluations / (r.forward_passes * L),
      static_cast<long long>(r.estimates.recompute_calls),
      static_cast<long long>(r.estimates.recompute_rows), t.seconds);
  std::printf(
      "  clean pass %.1f s (%.3f s per sample), interventions %.1f s (of which estimates %.1f s "
      "on %d samples), search %.1f s; %d of %d rows measured on %d of %d intervention "
      "samples (%s)\n",
      r.clean_seconds, r.clean_seconds / r.samples, r.intervention_seconds, r.estimate_seconds,
      r.estimates.samples, r.search_seconds, r.estimates.verified, r.estimates.candidates,
      r.stopping.used, r.stopping.upper_bound, r.stopping.reason.c_str());
  std::printf(
      "  Spearman estimate vs measured over the measured rows: target share %.3f, alpha_0 "
      "share %.3f, P0 norm ratio after %.3f\n",
      r.estimates.spearman_target, r.estimates.spearman_alpha0, r.estimates.spearman_norm_ratio);
  std::fflush(stdout);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  // OpenBLAS picks its kernels when it loads; where it fell back to its SSE3 ones on a CPU it does
  // not know, run again with the core the CLI would choose (src/app/main.cpp does the same), so
  // that this benchmark times the products the CLI runs.
  if (const char* core = ss::BlasCoreOverride(); core && setenv("OPENBLAS_CORETYPE", core, 1) == 0)
    execv("/proc/self/exe", argv);
  int samples = -1, length = -1, intervention_samples = 8, verify_top = 16, first_token = -1;
  bool resume = true;
  std::string mode = "both", model_path, precision = "f32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    const int v = std::atoi(argv[i + 1]);
    if (flag == "--samples")
      samples = v;
    else if (flag == "--length")
      length = v;
    else if (flag == "--intervention-samples")
      intervention_samples = v;
    else if (flag == "--resume")
      resume = v != 0;
    else if (flag == "--verify-top")
      verify_top = v;
    else if (flag == "--first-token")
      first_token = v;
    else if (flag == "--model")
      model_path = value;
    else if (flag == "--precision")
      precision = value;
    else if (flag == "--bf16")
      precision = v != 0 ? "bf16" : "f32";  // the earlier spelling
    else if (flag == "--mode" &&
             (value == "both" || value == "fast" || value == "exhaustive" || value == "fast-all"))
      mode = value;
    else {
      std::fprintf(stderr, "unknown flag or value %s %s\n", argv[i], argv[i + 1]);
      return 2;
    }
  }
  ss::Model model;
  try {
    const ss::Precision p = ss::ParsePrecision(precision);
    if (model_path.empty()) {
      ss::test::RandomModelShape shape;
      shape.n_layers = 12;
      shape.n_heads = 12;
      shape.n_kv_heads = 12;
      shape.dim = 768;
      shape.hidden_dim = 3072;
      shape.vocab_size = 50257;
      model = ss::test::RandomLlama(shape);
      model.config.gated_mlp = false;
      model.config.act = ss::ActKind::kGelu;
      ss::SetPrecision(model, p);
      if (samples < 0) samples = 32;
      if (length < 0) length = 256;
      if (first_token < 0) first_token = 1;
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      model = ss::LoadModel(model_path, p);
      ss::SetPrecision(model, p);
      std::printf("loaded %s at %s in %.1f s\n", model_path.c_str(), precision.c_str(),
                  Seconds(t0));
      if (samples < 0) samples = 16;
      if (length < 0) length = 64;
      if (first_token < 0) first_token = model.config.bos_id >= 0 ? model.config.bos_id : 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_explain: %s\n", e.what());
    return 1;
  }
  const ss::ModelConfig& c = model.config;
  std::vector<std::vector<int>> data(samples, std::vector<int>(length));
  uint64_t x = 1;
  for (auto& s : data) {
    for (int& t : s) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      t = 3 + static_cast<int>((x >> 33) % (c.vocab_size - 3));
    }
    s[0] = first_token;
  }
  std::printf(
      "%s (%d layers x %d heads, width %d), N = %d samples, T = %d, interventions on at most %d "
      "samples, precision %s, verify_top %d, resume at the intervened block: %s\n",
      model_path.empty() ? "GPT-2-small-shaped random model" : model_path.c_str(), c.n_layers,
      c.n_heads, c.dim, samples, length, std::min(samples, intervention_samples), precision.c_str(),
      verify_top, resume ? "yes" : "no");
  std::fflush(stdout);
  ss::explain::ExplainOptions o;
  o.intervention_samples = intervention_samples;
  o.resume_at_block = resume;
  o.verify_top = verify_top;
  Timed old_run, new_run;
  if (mode == "both" || mode == "exhaustive") {
    ss::explain::ExplainOptions all = o;
    all.exhaustive = true;
    all.early_stop = false;
    all.estimate_samples = 0;
    old_run = Run(model, data, all, "exhaustive (every row measured on every intervention sample)");
  }
  if (mode == "fast-all") {
    ss::explain::ExplainOptions all = o;
    all.early_stop = false;
    new_run = Run(model, data, all, "default path without early stopping");
  }
  if (mode == "both" || mode == "fast")
    new_run = Run(model, data, o, "default (estimates, best verify_top measured, early stopping)");
  if (mode != "both") return 0;
  const auto &a = old_run.result, &b = new_run.result;
  // The default path's measured rows against the exhaustive ones: equal where both measured the
  // same samples (the default may have stopped earlier: then its rows cover fewer samples).
  int differing = 0, compared = 0;
  for (size_t i = 0; i < b.interventions.size(); ++i) {
    const auto &p = b.interventions[i], &q = a.interventions[i];
    if (!p.measured || p.samples != q.samples) continue;
    ++compared;
    if (p.sink_after != q.sink_after || p.norm_ratio_after != q.norm_ratio_after ||
        p.layer_sink_after != q.layer_sink_after)
      ++differing;
  }
  const double old_iv = a.intervention_seconds + a.search_seconds;
  const double new_iv = b.intervention_seconds + b.search_seconds;
  std::printf(
      "side by side: forwards %lld -> %lld (%.1fx fewer), block evaluations %lld -> %lld "
      "(+ %lld one-token), wall %.1f s -> %.1f s (%.2fx), interventions and search %.1f s -> "
      "%.1f s (%.2fx)\n",
      static_cast<long long>(a.forward_passes), static_cast<long long>(b.forward_passes),
      static_cast<double>(a.forward_passes) / b.forward_passes,
      static_cast<long long>(a.block_evaluations), static_cast<long long>(b.block_evaluations),
      static_cast<long long>(b.estimates.recompute_rows), old_run.seconds, new_run.seconds,
      old_run.seconds / new_run.seconds, old_iv, new_iv, old_iv / new_iv);
  std::printf(
      "verdicts %s / %s, circuits %s; measured rows on the same samples differing from the "
      "exhaustive run: %d of %d\n",
      a.verdict.c_str(), b.verdict.c_str(),
      a.circuit.components == b.circuit.components ? "equal" : "DIFFERENT", differing, compared);
  if (compared == 0)
    std::printf(
        "  (no row is comparable: the default path stopped after %d of %d intervention samples; "
        "--mode fast-all and tests/test_explain.cpp compare the rows with early stopping off)\n",
        b.stopping.used, b.stopping.upper_bound);
  return differing == 0 && a.verdict == b.verdict && a.circuit.components == b.circuit.components
             ? 0
             : 1;
}
