// Prefill and generation speed on the shipped stories260K model, beside the naive single-thread
// path (plain loops, no BLAS; src/reference) measured in the same run.
//   build/bench/bench_forward [--benchmark_filter=...]
// Counters: tokens/s ("tok/s").
#include <benchmark/benchmark.h>

#include "io/llama2c.h"
#include "model/model.h"
#include "reference/naive_llama.h"

namespace {

const ss::Model& Stories() {
  static ss::Model model =
      ss::LoadLlama2c(SINKSCOPE_REPO_DIR "/models/stories260K/stories260K.bin");
  return model;
}

std::vector<int> Tokens(int n) {
  std::vector<int> t = {1};
  for (int i = 1; i < n; ++i) t.push_back(3 + (i * 131) % 509);
  return t;
}

// One forward over T tokens at once (the analysis path).
void BM_Prefill(benchmark::State& state) {
  const ss::Model& model = Stories();
  const int T = static_cast<int>(state.range(0));
  auto tokens = Tokens(T);
  ss::KVCache cache = ss::KVCache::Create(model.config, T);
  ss::RunState run;
  ss::ForwardRequest req;
  req.tokens = tokens;
  req.logits = ss::LogitsMode::kAll;
  for (auto _ : state) {
    cache.Clear();
    benchmark::DoNotOptimize(ss::Forward(model, cache, run, req).data());
  }
  state.counters["tok/s"] = benchmark::Counter(T * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Prefill)->Arg(64)->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond);

// Token-by-token decode with the KV cache (the generation path), T steps.
void BM_Decode(benchmark::State& state) {
  const ss::Model& model = Stories();
  const int T = static_cast<int>(state.range(0));
  auto tokens = Tokens(T);
  ss::KVCache cache = ss::KVCache::Create(model.config, T);
  ss::RunState run;
  for (auto _ : state) {
    cache.Clear();
    for (int t = 0; t < T; ++t) {
      ss::ForwardRequest req;
      req.tokens = std::span<const int>(&tokens[t], 1);
      req.logits = ss::LogitsMode::kLast;
      benchmark::DoNotOptimize(ss::Forward(model, cache, run, req).data());
    }
  }
  state.counters["tok/s"] = benchmark::Counter(T * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Decode)->Arg(256)->Unit(benchmark::kMillisecond);

// The naive single-thread path, token by token (what llama2.c's run.c does).
void BM_NaiveDecode(benchmark::State& state) {
  const ss::Model& model = Stories();
  const int T = static_cast<int>(state.range(0));
  auto tokens = Tokens(T);
  for (auto _ : state) {
    ss::NaiveLlama naive(model);
    for (int t = 0; t < T; ++t) benchmark::DoNotOptimize(naive.Step(tokens[t]).data());
  }
  state.counters["tok/s"] = benchmark::Counter(T * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_NaiveDecode)->Arg(256)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
