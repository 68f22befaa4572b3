// The typed KV cache at the Llama-2-7B shape (32 layers, 32 heads of 128, no GQA): one decode
// query's sink + window attention over a 32K-entry cache of one layer, stored in f32, bf16, f16,
// q8_0 and q4_0 (and q4_0 with the first 4 entries kept f32), side by side in one run; the bytes a
// 32K cache of all 32 layers takes in each type; and the rate at which each reads its cache.
// Usage: bench_kv_cache [entries (32768)] [repeats (5)]. A plain program (Google Benchmark's
// fixtures would hold every type's 32K cache at once).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/kv_types.h"
#include "kernels/ops.h"

int main(int argc, char** argv) {
  using namespace ss;
  const int entries = argc > 1 ? std::atoi(argv[1]) : 32768;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const int layers = 32, H = 32, Hkv = 32, Dh = 128, kv_row = Hkv * Dh, sinks = 4;
  const int window = entries - sinks, ring = window;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(H * Dh);
  for (float& x : q) x = dist(rng);
  std::printf("Llama-2-7B-shaped attention, one decode query (T = 1, %d heads of %d) over %d cached entries, "
              "%d threads; best of %d\n", H, Dh, entries, omp_get_max_threads(), repeats);
  std::printf("%-14s %14s %16s %12s %12s %14s\n", "kv cache", "bytes/token", "32K cache (GiB)", "ms / layer",
              "GB/s read", "ms / token (32 layers)");
  double f32_ms = 0;
  struct Case {
    KvType type;
    int keep;
  };
  for (const Case c : {Case{KvType::kF32, 0}, Case{KvType::kBf16, 0}, Case{KvType::kF16, 0},
                       Case{KvType::kQ8_0, 0}, Case{KvType::kQ4_0, 0}, Case{KvType::kQ4_0, 4}}) {
    const size_t row_bytes = KvRowBytes(c.type, kv_row);
    std::vector<float> row(kv_row), f32k, f32v;
    std::vector<uint8_t> kb, vb;
    std::vector<int> kept_slot(entries, -1);
    std::vector<float> kept_k(static_cast<size_t>(std::max(c.keep, 1)) * kv_row),
        kept_v(static_cast<size_t>(std::max(c.keep, 1)) * kv_row);
    KvRows kr, vr;
    if (c.type == KvType::kF32) {
      f32k.resize(static_cast<size_t>(entries) * kv_row);
      f32v.resize(f32k.size());
      for (float& x : f32k) x = dist(rng);
      for (float& x : f32v) x = dist(rng);
      kr.f32 = f32k.data();
      vr.f32 = f32v.data();
    } else {
      kb.resize(static_cast<size_t>(entries) * row_bytes);
      vb.resize(kb.size());
      for (int r = 0; r < entries; ++r) {
        for (float& x : row) x = dist(rng);
        KvEncodeRow(c.type, row.data(), kv_row, kb.data() + r * row_bytes);
        for (float& x : row) x = dist(rng);
        KvEncodeRow(c.type, row.data(), kv_row, vb.data() + r * row_bytes);
      }
      for (int r = 0; r < c.keep; ++r) kept_slot[r] = r;
      kr = {nullptr, c.type, kb.data(), row_bytes, c.keep ? kept_slot.data() : nullptr, kept_k.data()};
      vr = {nullptr, c.type, vb.data(), row_bytes, c.keep ? kept_slot.data() : nullptr, kept_v.data()};
    }
    std::vector<float> out(H * Dh);
    double best = 1e30;
    for (int i = 0; i < repeats + 1; ++i) {  // the first call warms the scratch buffers
      const auto t0 = std::chrono::steady_clock::now();
      SinkWindowAttention(q.data(), q.data(), kr, vr, out.data(), 1, H, Hkv, Dh, sinks, window, ring,
                          /*first_index=*/static_cast<int64_t>(entries) * 3, AttnOptions{});
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) best = std::min(best, ms);
    }
    if (c.type == KvType::kF32) f32_ms = best;
    const double bytes_per_token = 2.0 * layers * row_bytes;
    const double layer_bytes = 2.0 * entries * row_bytes;
    char name[32];
    std::snprintf(name, sizeof name, "%s%s", KvTypeName(c.type), c.keep ? "+first:4" : "");
    std::printf("%-14s %14.0f %16.2f %12.2f %12.1f %14.0f  (%.2fx f32's time)\n", name, bytes_per_token,
                bytes_per_token * 32768 / (1 << 30), best, layer_bytes / best / 1e6, best * layers,
                best / f32_ms);
  }
  return 0;
}
