// Cost of a full `sinkscope explain` on a random-weight model shaped like GPT-2 small (12 layers,
// 12 heads, width 768, MLP 3072; Llama family, ungated GELU MLP, vocabulary 50257 but no logits are
// computed). A plain program, not a ctest:
//   build/bench/bench_explain [--samples 32] [--length 256] [--intervention-samples 8] [--resume 1|0]
//                             [--bf16 0|1]   (--precision bf16: the model's products in bf16)
// Prints the wall time of the clean pass alone (N forwards with every observer) and of the whole
// explain (clean pass, interventions, search), the number of forwards and the time per forward.
// A random model has no sink, so the greedy search does not run: the figure is the clean pass plus
// the full intervention table (2 L MLP ablations, L H head ablations, a donor, L - 1 patches and a
// shift per intervention sample).
#include <chrono>
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

}  // namespace

int main(int argc, char** argv) {
  int samples = 32, length = 256, intervention_samples = 8;
  bool resume = true, bf16 = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (flag == "--samples") samples = v;
    else if (flag == "--length") length = v;
    else if (flag == "--intervention-samples") intervention_samples = v;
    else if (flag == "--resume") resume = v != 0;
    else if (flag == "--bf16") bf16 = v != 0;
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
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
  auto t0 = std::chrono::steady_clock::now();
  ss::explain::ExplainOptions o;
  o.intervention_samples = intervention_samples;
  o.resume_at_block = resume;
  const auto r = ss::explain::Explain(model, data, o);
  const double total = Seconds(t0);
  std::printf("GPT-2-small-shaped random model, N = %d samples, T = %d, interventions on %d samples\n",
              samples, length, std::min(samples, intervention_samples));
  std::printf("resume at the intervened block: %s; precision %s\n",
              resume ? "yes" : "no (every forward from the embedding)", bf16 ? "bf16" : "f32");
  std::printf("verdict %s; %lld forwards, %lld block evaluations (%.0f%% of full forwards) in %.1f s\n",
              r.verdict.c_str(), static_cast<long long>(r.forward_passes),
              static_cast<long long>(r.block_evaluations),
              100.0 * r.block_evaluations / (r.forward_passes * shape.n_layers), total);
  std::printf("clean pass %.1f s (%.3f s per sample), interventions %.1f s, search %.1f s\n",
              r.clean_seconds, r.clean_seconds / samples, r.intervention_seconds, r.search_seconds);
  return 0;
}
