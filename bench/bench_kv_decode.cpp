// Decode with a long streaming KV cache, end to end: a model at native precision, a sinks (4) +
// ring cache of ENTRIES entries stored in TYPE, every entry filled, then TOKENS tokens decoded
// greedily, each attending to all ENTRIES entries. Prints the cache's bytes, each token's time,
// tokens/s, and the process's peak resident memory.
//
//   bench_kv_decode MODEL ENTRIES TYPE [TOKENS (4)] [KEEP (0)]
//   TYPE: f32 | bf16 | f16 | q8_0 | q4_0, or K/V (q8_0/q4_0); KEEP: entries 0..KEEP-1 kept f32.
//
// Filling 32K entries of a 7B model by a prefill would take an hour on a small CPU, so the cache is
// filled the cheap way: a 32-token prompt is prefilled through the stream path, and its entries
// 4..31 are copied round the ring until every row holds one. A decode step's cost does not depend
// on what the rows hold, only on how many there are; the logits are those of a repetitive context.
// One case per process, so that the peak resident memory is the case's own (run it under
// /usr/bin/time -v as well: bench/run_kv_decode_bench.sh).
#include <fmt/format.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/file_util.h"
#include "io/load.h"
#include "model/model.h"

int main(int argc, char** argv) {
  using namespace ss;
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_kv_decode MODEL ENTRIES TYPE[/VTYPE] [TOKENS] [KEEP]\n");
    return 2;
  }
  try {
    const std::string path = argv[1];
    const int entries = std::atoi(argv[2]);
    const std::string type = argv[3];
    const int tokens = argc > 4 ? std::atoi(argv[4]) : 4;
    const int keep_n = argc > 5 ? std::atoi(argv[5]) : 0;
    constexpr int kPrompt = 32, kSinks = 4;
    if (entries < 2 * kPrompt)
      Fail("ENTRIES: expected at least {}, got '{}'", 2 * kPrompt, argv[2]);
    if (tokens < 1) Fail("TOKENS: expected 1 or more, got '{}'", argv[4]);
    if (keep_n < 0 || keep_n > kSinks) Fail("KEEP: expected 0 to {}, got '{}'", kSinks, argv[5]);
    const size_t slash = type.find('/');
    const KvType k_type = ParseKvType(type.substr(0, slash), "TYPE");
    const KvType v_type =
        slash == std::string::npos ? k_type : ParseKvType(type.substr(slash + 1), "TYPE");

    const auto t_load = std::chrono::steady_clock::now();
    const Model model = LoadModel(path, Precision::kNative);
    const ModelConfig& c = model.config;
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    std::vector<int64_t> keep;
    for (int i = 0; i < keep_n; ++i) keep.push_back(i);
    // The ring holds the window, and the prompt's chunk while it is prefilled (StreamLayout).
    StreamLayout layout;
    layout.sinks = kSinks;
    layout.window = entries - kSinks;
    layout.ring = layout.window - 1 + kPrompt;
    const int capacity = kSinks + layout.ring;
    CheckMemory(static_cast<uint64_t>(c.n_layers) * capacity *
                    (KvRowBytes(k_type, c.kv_dim()) + KvRowBytes(v_type, c.kv_dim())),
                fmt::format("ENTRIES {}: a KV cache in {} / {}", entries, KvTypeName(k_type),
                            KvTypeName(v_type)));
    KVCache cache = KVCache::CreateTyped(c, capacity, k_type, v_type, keep);
    std::printf(
        "%s: %d layers, %d heads (%d kv) of %d, loaded in %.1f s at native precision; %d threads\n",
        path.c_str(), c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, load_s,
        omp_get_max_threads());
    std::printf(
        "cache: %d entries (%d rows with the prompt's chunk), %s keys / %s values%s: %.3f GiB "
        "(%lld "
        "bytes a token)\n",
        entries, capacity, KvTypeName(k_type), KvTypeName(v_type),
        keep_n ? " (first entries kept f32)" : "", cache.Bytes() / double(1 << 30),
        static_cast<long long>(cache.BytesPerToken()));

    RunState state;
    std::vector<int> prompt(kPrompt);
    for (int i = 0; i < kPrompt; ++i) prompt[i] = 1 + (i * 131) % (c.vocab_size - 1);
    ForwardRequest request;
    request.tokens = prompt;
    request.logits = LogitsMode::kLast;
    request.stream = &layout;
    layout.first_index = 0;
    Forward(model, cache, state, request);
    // Stream indices kPrompt .. entries - 1 take the prompt's entries kSinks .. kPrompt - 1 in
    // turn.
    for (int64_t m = kPrompt; m < entries; ++m)
      cache.CopyRow(cache, layout.Row(kSinks + (m - kPrompt) % (kPrompt - kSinks)), layout.Row(m));
    cache.length = entries;

    std::vector<double> ms;
    int token = prompt.back();
    for (int i = 0; i < tokens; ++i) {
      layout.first_index = entries + i;  // attends to the sinks and the entries - 4 most recent
      request.tokens = std::span<const int>(&token, 1);
      const auto t0 = std::chrono::steady_clock::now();
      const Tensor logits = Forward(model, cache, state, request);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      token = static_cast<int>(std::max_element(logits.data(), logits.data() + c.vocab_size) -
                               logits.data());
    }
    double total = 0;
    std::printf("ms per token:");
    for (double t : ms) {
      std::printf(" %.0f", t);
      total += t;
    }
    const double best = *std::min_element(ms.begin(), ms.end());
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::printf(
        "\ndecode: %.3f tokens/s (mean of %d), %.3f at the best token; peak resident %.2f GiB\n",
        1000.0 * tokens / total, tokens, 1000.0 / best, ru.ru_maxrss / double(1 << 20));
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_kv_decode: %s\n", e.what());
    return 1;
  }
}
