// Qwen3.5 / Qwen3-Next shapes (bench/run_qwen35_bench.sh makes the models): what the Gated
// DeltaNet layers cost beside the attention layers, decode speed, and memory over a long stream.
//   bench_qwen35 MODEL prefill T   one T-token forward, the time of each layer's mixer (from the
//                                  block's input to hook_attn_out: the DeltaNet or the gated
//                                  attention) and of its MLP, summed per layer kind; then analyze
//                                  (the fused path, one sample) on the same tokens; peak RSS
//   bench_qwen35 MODEL decode N    N tokens one at a time through the sinks cache (4 + 252) after
//                                  a 64-token prefill: tokens/s
//   bench_qwen35 MODEL flat N      N tokens through the sinks cache (4 + 252): CPU time per token
//                                  over the last 1,000 and resident memory at 1K, 10K, ... and N
// Options after those: --precision P (default: the file's). x is rounded to int8 in the products
// with quantised weights for decode and flat (as generate, chat and stream do), f32 for prefill.
// A plain program: each mode is one process, so peak RSS is that mode's.
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "analysis/analyze.h"
#include "io/load.h"
#include "kernels/gemm_ggml.h"
#include "model/precision.h"
#include "stream/stream.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double StatusMiB(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == field) {
      double kb = 0;
      in >> kb;
      return kb / 1024.0;
    }
    std::getline(in, key);
  }
  return 0;
}

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int Token(int64_t i, int vocab) { return 3 + static_cast<int>((i * 2654435761u) % (vocab - 3)); }

void Prefill(const ss::Model& model, int T) {
  const ss::ModelConfig& c = model.config;
  std::vector<int> tokens(T);
  for (int i = 0; i < T; ++i) tokens[i] = Token(i, c.vocab_size);
  std::vector<Clock::time_point> start(c.n_layers), mixed(c.n_layers), end(c.n_layers);
  ss::Hooks hooks;
  hooks.Add(ss::HookPoint::kResidPre, -1,
            [&](const ss::HookContext& ctx, ss::Tensor&) { start[ctx.layer] = Clock::now(); });
  hooks.Add(ss::HookPoint::kAttnOut, -1,
            [&](const ss::HookContext& ctx, ss::Tensor&) { mixed[ctx.layer] = Clock::now(); });
  hooks.Add(ss::HookPoint::kResidPost, -1,
            [&](const ss::HookContext& ctx, ss::Tensor&) { end[ctx.layer] = Clock::now(); });
  ss::KVCache cache = ss::KVCache::CreateSingleUse(c, T);
  ss::RunState state;
  ss::ForwardRequest req;
  req.tokens = tokens;
  req.logits = ss::LogitsMode::kNone;
  req.hooks = &hooks;
  const auto t0 = Clock::now();
  ss::Forward(model, cache, state, req);
  const double total = Seconds(t0, Clock::now());
  double mixer[2] = {0, 0}, mlp[2] = {0, 0};
  int count[2] = {0, 0};
  for (int l = 0; l < c.n_layers; ++l) {
    const int kind = c.LinearLayer(l) ? 1 : 0;
    mixer[kind] += Seconds(start[l], mixed[l]);
    mlp[kind] += Seconds(mixed[l], end[l]);
    ++count[kind];
  }
  fmt::print("prefill T={}: {:.3f} s ({:.0f} tokens/s)\n", T, total, T / total);
  for (int kind : {1, 0})
    if (count[kind] > 0)
      fmt::print(
          "  {:<15} {:>2} layers: mixer {:.3f} s ({:.1f} ms per layer), MLP {:.3f} s ({:.1f} ms "
          "per "
          "layer)\n",
          kind ? "Gated DeltaNet" : "gated attention", count[kind], mixer[kind],
          1e3 * mixer[kind] / count[kind], mlp[kind], 1e3 * mlp[kind] / count[kind]);
  ss::analysis::AnalyzeOptions o;
  const auto t1 = Clock::now();
  const auto r = ss::analysis::AnalyzeSamples(model, ss::analysis::Condition::kNoBos, {tokens}, o);
  fmt::print("analyze (fused, 1 sample of {} tokens): {:.3f} s; Sink_0 {:.3f}\n", T,
             Seconds(t1, Clock::now()), r.sink_rate[0]);
  fmt::print("peak RSS {:.0f} MiB\n", StatusMiB("VmHWM:"));
}

void Decode(const ss::Model& model, int n) {
  ss::stream::StreamOptions o;
  auto cache = ss::stream::MakeStreamCache(model, o);
  std::vector<int> fill;
  for (int i = 0; i < 64; ++i) fill.push_back(Token(i, model.config.vocab_size));
  cache->Prefill(fill);
  const double c0 = CpuSeconds();
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) cache->Step(Token(64 + i, model.config.vocab_size));
  const double wall = Seconds(t0, Clock::now()), cpu = CpuSeconds() - c0;
  fmt::print(
      "decode {} tokens: {:.2f} tokens/s (wall), {:.2f} tokens per CPU-s; peak RSS {:.0f} MiB\n", n,
      n / wall, n / cpu, StatusMiB("VmHWM:"));
}

void Flat(const ss::Model& model, int64_t n) {
  auto cache = ss::stream::MakeStreamCache(model, ss::stream::StreamOptions{});
  double last = 0;
  fmt::print("{:>10} {:>22} {:>14}\n", "tokens", "CPU us/token (last 1K)", "RSS MiB");
  for (int64_t i = 0, next = 1000; i < n; ++i) {
    if (i == next - 1000) last = CpuSeconds();
    cache->Step(Token(i, model.config.vocab_size));
    if (i + 1 == next || i + 1 == n) {
      fmt::print("{:>10} {:>22.1f} {:>14.1f}\n", i + 1, (CpuSeconds() - last) / 1000 * 1e6,
                 StatusMiB("VmRSS:"));
      next = std::min<int64_t>(next * 10, n);
      if (next == i + 1) break;
      if (next - 1000 < i + 1) last = CpuSeconds();
    }
  }
  fmt::print("KV cache peak {:.1f} KiB\n", cache->peak_kv_bytes() / 1024.0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    fmt::print(stderr, "usage: bench_qwen35 MODEL prefill|decode|flat N [--precision P]\n");
    return 2;
  }
  try {
    const std::string path = argv[1], mode = argv[2];
    const int64_t n = std::atoll(argv[3]);
    ss::Precision p = ss::FilePrecision(path);
    if (argc >= 6 && std::string(argv[4]) == "--precision") p = ss::ParsePrecision(argv[5]);
    // x rounded to int8 for the quantised types where the CLI's decoding verbs round it
    // (generate, chat, stream); the measuring verbs' f32 for prefill.
    ss::SetGgmlActivationsForAll(mode == "prefill" ? ss::GgmlActivations::kF32
                                                   : ss::GgmlActivations::kInt8);
    const auto t0 = Clock::now();
    ss::Model model = ss::LoadModel(path, p);
    ss::SetPrecision(model, p);
    fmt::print(
        "{}: {} ({} layers, {} Gated DeltaNet), precision {}, loaded in {:.1f} s\n", path,
        model.config.arch, model.config.n_layers,
        [&] {
          int k = 0;
          for (int l = 0; l < model.config.n_layers; ++l) k += model.config.LinearLayer(l);
          return k;
        }(),
        ss::PrecisionName(p), Seconds(t0, Clock::now()));
    if (mode == "prefill") Prefill(model, static_cast<int>(n));
    if (mode == "decode") Decode(model, static_cast<int>(n));
    if (mode == "flat") Flat(model, n);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_qwen35: {}\n", e.what());
    return 1;
  }
  return 0;
}
