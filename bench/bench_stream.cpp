// Streaming (src/stream) in one run:
//  1. per-token time of `sinks` versus `recompute` at W = 256 and 1024 on a random-weight Llama of
//     GPT-2-small shape (12 layers, 12 heads, width 768, MLP 3072, vocabulary 4096);
//  2. per-token time and resident memory of `sinks` (4 + 252) on stories260K after 1K, 10K, 100K
//     and 1M streamed tokens (both should be flat);
//  3. what the position handling costs per token: rotating every cached key (options "rotate at
//     read" and "re-rotate on eviction", docs/STREAMING.md) versus the second query rotation
//     sinkscope uses, and the rounding drift of re-rotating a key W times.
// A summary table with the speed-ups is printed after the benchmarks (bench/run_stream_bench.sh).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "io/llama2c.h"
#include "kernels/ops.h"
#include "model/random_init.h"
#include "stream/stream.h"

namespace {

using ss::stream::Policy;

std::map<std::string, double> g_ms_per_token;         // summary: name -> ms per token
std::map<int64_t, std::pair<double, double>> g_flat;  // tokens -> (us per token, RSS MiB)

const ss::Model& Gpt2Small() {
  static ss::Model model = [] {
    ss::ModelConfig c;
    c.dim = 768;
    c.hidden_dim = 3072;
    c.n_layers = 12;
    c.n_heads = 12;
    c.n_kv_heads = 12;
    c.head_dim = 64;
    c.vocab_size = 4096;
    c.max_seq_len = 2048;
    return ss::MakeRandomModel(c, 1);
  }();
  return model;
}

const ss::Model& Stories() {
  static ss::Model model =
      ss::LoadLlama2c(SINKSCOPE_REPO_DIR "/models/stories260K/stories260K.bin");
  return model;
}

int Token(int64_t i, int vocab) { return 3 + static_cast<int>((i * 2654435761u) % (vocab - 3)); }

double RssMiB() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      double kb;
      in >> kb;
      return kb / 1024.0;
    }
    std::getline(in, key);
  }
  return 0;
}

// Args: policy (0 sinks, 1 recompute), W. The cache is filled first, so every timed token evicts.
void BM_PerToken(benchmark::State& state) {
  const ss::Model& model = Gpt2Small();
  ss::stream::StreamOptions o;
  o.policy = state.range(0) == 0 ? Policy::kSinks : Policy::kRecompute;
  o.sinks = 4;
  o.window = static_cast<int>(state.range(1)) - 4;  // S + W = 256 or 1024 entries
  auto cache = ss::stream::MakeStreamCache(model, o);
  std::vector<int> fill;
  for (int i = 0; i < o.sinks + o.window; ++i) fill.push_back(Token(i, 4096));
  cache->Prefill(fill);
  int64_t i = fill.size();
  for (auto _ : state) benchmark::DoNotOptimize(cache->Step(Token(i++, 4096)).data());
  const std::string name =
      std::string(ss::stream::PolicyName(o.policy)) + " " + std::to_string(state.range(1));
  state.SetLabel(name);
  g_ms_per_token[name] = 0;  // filled in by SummaryReporter from the benchmark's timing
}

// Per-token time from the benchmark's own timing, kept for the summary.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.report_label.empty() || r.iterations == 0) continue;
      // Real time per iteration (one token) in the benchmark's unit, milliseconds.
      // CPU time: run with OMP_NUM_THREADS=1 (run_stream_bench.sh) it is the whole compute, and on
      // a shared machine it does not count the neighbours.
      if (g_ms_per_token.count(r.report_label))
        g_ms_per_token[r.report_label] = r.GetAdjustedCPUTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

BENCHMARK(BM_PerToken)
    ->Args({0, 256})
    ->Args({1, 256})
    ->Args({0, 1024})
    ->Args({1, 1024})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// One stream of 1M tokens of sinks (4 + 252) through stories260K; at 1K, 10K, 100K and 1M tokens
// records the CPU time per token over the last 1,000 tokens (thread CPU time: on a shared machine
// wall time measures the neighbours) and the resident memory.
void BM_SinksFlat(benchmark::State& state) {
  const ss::Model& model = Stories();
  for (auto _ : state) {
    auto cache = ss::stream::MakeStreamCache(model, ss::stream::StreamOptions{});
    double last_start = 0;
    for (int64_t i = 0, next = 1000; i < 1000000; ++i) {
      if (i == next - 1000) last_start = ThreadCpuSeconds();
      benchmark::DoNotOptimize(cache->Step(Token(i, 512)).data());
      if (i + 1 == next) {
        g_flat[next] = {(ThreadCpuSeconds() - last_start) / 1000 * 1e6, RssMiB()};
        state.counters["us/token@" + std::to_string(next)] = g_flat[next].first;
        state.counters["RSS MiB@" + std::to_string(next)] = g_flat[next].second;
        next *= 10;
      }
    }
    state.counters["KV KiB"] = cache->peak_kv_bytes() / 1024.0;
  }
}
BENCHMARK(BM_SinksFlat)->Iterations(1)->Unit(benchmark::kSecond);

// Position handling per token for the GPT-2-small shape (12 layers, 12 kv heads x 64):
// arg = cache entries rotated per layer (S + W) for "rotate at read" / "re-rotate on eviction";
// arg = 1 is the extra query rotation of the two-rotation scheme.
void BM_RotationPerToken(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0)), L = 12, H = 12, Dh = 64;
  std::vector<float> keys(static_cast<size_t>(rows) * H * Dh, 0.5f);
  std::vector<int> pos(rows);
  for (int i = 0; i < rows; ++i) pos[i] = i;
  for (auto _ : state) {
    for (int l = 0; l < L; ++l)
      ss::Rope(keys.data(), pos, H, Dh, Dh, 10000.0f, ss::RopeKind::kHalf);
    benchmark::DoNotOptimize(keys.data());
  }
  state.SetLabel(rows == 1 ? "two-rotation: one extra query rotation" : "rotate every cached key");
}
BENCHMARK(BM_RotationPerToken)->Arg(1)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond);

// Re-rotating on eviction moves each kept key back one position per new token, so a key is rotated
// up to W times; in float the errors add up. Reports the worst relative error after W steps.
void BM_ReRotationDrift(benchmark::State& state) {
  const int W = static_cast<int>(state.range(0)), Dh = 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> k(Dh), direct(Dh);
  double worst = 0;
  for (auto _ : state) {
    for (float& x : k) x = normal(rng);
    direct = k;
    const int start = W + 3;
    std::vector<int> p = {start};
    ss::Rope(k.data(), p, 1, Dh, Dh, 10000.0f, ss::RopeKind::kHalf);  // cached at position start
    std::vector<int> back = {-1};
    for (int i = 0; i < W; ++i) ss::Rope(k.data(), back, 1, Dh, Dh, 10000.0f, ss::RopeKind::kHalf);
    p = {start - W};
    ss::Rope(direct.data(), p, 1, Dh, Dh, 10000.0f, ss::RopeKind::kHalf);
    double diff = 0, ref = 0;
    for (int d = 0; d < Dh; ++d) {
      diff = std::max(diff, static_cast<double>(std::fabs(k[d] - direct[d])));
      ref = std::max(ref, static_cast<double>(std::fabs(direct[d])));
    }
    worst = std::max(worst, diff / ref);
  }
  state.counters["max rel error"] = worst;
}
BENCHMARK(BM_ReRotationDrift)->Arg(256)->Arg(1024)->Iterations(200);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf(
      "\nsummary: per-token time, random GPT-2-small-shaped Llama (12 x 768, vocab 4096)\n");
  std::printf("(CPU ms per token, one thread)\n");
  std::printf("%-8s %14s %16s %10s\n", "S+W", "sinks ms/tok", "recompute ms/tok", "speed-up");
  for (int w : {256, 1024}) {
    const std::string s = "sinks " + std::to_string(w), r = "recompute " + std::to_string(w);
    if (!g_ms_per_token.count(s) || !g_ms_per_token.count(r)) continue;
    std::printf("%-8d %14.2f %16.1f %9.1fx\n", w, g_ms_per_token[s], g_ms_per_token[r],
                g_ms_per_token[r] / g_ms_per_token[s]);
  }
  if (!g_flat.empty()) {
    std::printf("\nsinks 4+252 on stories260K: flat in the stream length\n");
    std::printf("%-10s %18s %10s\n", "tokens", "CPU us/token (last 1K)", "RSS MiB");
    for (const auto& [n, v] : g_flat)
      std::printf("%-10lld %18.1f %10.1f\n", static_cast<long long>(n), v.first, v.second);
  }
  benchmark::Shutdown();
  return 0;
}
