// Training throughput against the machine's sgemm ceiling, measured in the same run:
//   BM_SgemmCeiling   a square sgemm (n = 512) through the same OpenBLAS: the GFLOP/s ceiling
//   BM_TrainStep/0    one optimiser step (forward, backward, AdamW) of the trainer on a config:
//                     tokens/s and achieved GFLOP/s, per second of wall time
//   BM_TrainStep/1    the same at --precision bf16 (train/linear_bf16.h)
// Training FLOPs per token follow the usual count (Kaplan et al. 2020; Chowdhery et al. 2022,
// appendix B): 6 * (matmul parameters, LM head included) + 12 * L * D * T for attention scores and
// values (full T x T, as the trainer computes it). The configuration (bench/run_train_bench.sh
// passes the same one to the PyTorch peer) comes from the environment:
//   SS_BENCH_DIM, SS_BENCH_LAYERS, SS_BENCH_HEADS, SS_BENCH_VOCAB, SS_BENCH_BATCH, SS_BENCH_SEQ.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdlib>
#include <vector>

#include "train/data.h"
#include "train/optimizer.h"
#include "train/train_model.h"

namespace {

int Env(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

ss::train::TrainConfig BenchConfig() {
  ss::train::TrainConfig c;
  c.dim = Env("SS_BENCH_DIM", 128);
  c.n_layers = Env("SS_BENCH_LAYERS", 4);
  c.n_heads = Env("SS_BENCH_HEADS", 4);
  c.n_kv_heads = c.n_heads;
  c.vocab_size = Env("SS_BENCH_VOCAB", 2048);
  c.batch_size = Env("SS_BENCH_BATCH", 16);
  c.seq_len = Env("SS_BENCH_SEQ", 128);
  return c;
}

void BM_SgemmCeiling(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SgemmCeiling)->Arg(512)->MeasureProcessCPUTime()->MinTime(2.0);

void BM_TrainStep(benchmark::State& state) {
  using namespace ss::train;
  TrainConfig c = BenchConfig();
  if (state.range(0) == 1) c.precision = "bf16";
  const int B = c.batch_size, T = c.seq_len;
  TrainModel<float> model(c, B, T);
  model.InitParams(1);
  AdamW adam;
  adam.Init(model.layout().total);
  BigramBackcopy data(c.vocab_size, 3, 1, true);
  Rng rng(2);
  std::vector<int> tokens(size_t(B) * T), targets(size_t(B) * T);
  for (auto _ : state) {
    data.TrainBatch(rng, B, T, tokens.data(), targets.data());
    model.Forward(tokens.data(), targets.data());
    model.Backward();
    ClipGradNorm(model.grads, 1.0f);
    adam.Step(model.params, model.grads, model.layout(), c, 1e-3);
  }
  // Matmul parameters: everything 2-D except the embedding lookup (the LM head counts, tied or
  // not).
  double matmul_params = 0;
  for (const ParamTensor& t : model.layout().tensors)
    if (t.shape.size() == 2 && t.name != "model.embed_tokens.weight") matmul_params += t.numel;
  if (c.tied_embeddings) matmul_params += double(c.vocab_size) * c.dim;  // the LM head
  const double flops_per_token = 6.0 * matmul_params + 12.0 * c.n_layers * c.dim * T;
  const double n_tokens = double(B) * T * state.iterations();
  state.counters["tokens/s"] = benchmark::Counter(n_tokens, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(n_tokens * flops_per_token / 1e9, benchmark::Counter::kIsRate);
  state.counters["params"] = double(model.layout().total);
  state.SetLabel(c.precision + " D" + std::to_string(c.dim) + " L" + std::to_string(c.n_layers) +
                 " H" + std::to_string(c.n_heads) + " V" + std::to_string(c.vocab_size) + " B" +
                 std::to_string(B) + " T" + std::to_string(T));
}
BENCHMARK(BM_TrainStep)
    ->Arg(0)
    ->Arg(1)
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->MinTime(3.0)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
