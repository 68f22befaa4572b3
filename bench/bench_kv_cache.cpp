// The streaming KV cache at the Llama-2-7B shape (32 layers, 32 heads of 128, no GQA): one decode
// query's sink + window attention over one layer's cache of N entries (default 32K), side by side
// in one run:
//   <type> head-major the streaming caches as they are stored (kernels/kv_types.h: each head's
//                     rows contiguous), f32 (the default cache, the reference for "vs f32"), bf16,
//                     f16, q8_0, q4_0, and q4_0 with the first 4 entries kept f32
//   <type> row-major  the layout before: a token's row of all heads, then the next (a head reads
//                     512 bytes of f32 every 16 KiB); f32 as the dense cache still stores it,
//                     q8_0 and q4_0 through the same kernels as head-major
// the bytes a cache of N entries of all 32 layers takes in each type, the rate at which each reads
// its cache, and its time against the f32 streaming cache's (wall and CPU). Every case's output is
// checked against the f32 kernel on its dequantised rows (bit for bit: the same arithmetic).
// Usage: bench_kv_cache [entries (32768)] [repeats (5)]. SINKSCOPE_SIMD=avx2 runs the AVX2 kernels.
// A plain program: one case's cache at a time (Google Benchmark's fixtures would hold them all).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

#include "kernels/kv_types.h"
#include "kernels/ops.h"
#include "kernels/vecmath.h"

int main(int argc, char** argv) {
  using namespace ss;
  const int entries = argc > 1 ? std::atoi(argv[1]) : 32768;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  if (entries < 8 || repeats < 1) {
    std::fprintf(stderr, "usage: bench_kv_cache [entries >= 8] [repeats >= 1]\n");
    return 2;
  }
  const int layers = 32, H = 32, Hkv = 32, Dh = 128, kv_row = Hkv * Dh, sinks = 4;
  const int window = entries - sinks, ring = window;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(H * Dh), qs(H * Dh);
  for (float& x : q) x = dist(rng);
  for (float& x : qs) x = dist(rng);
  std::printf(
      "Llama-2-7B-shaped attention, one decode query (T = 1, %d heads of %d) over %d cached "
      "entries, "
      "%d threads, SIMD %s; best of %d\n",
      H, Dh, entries, omp_get_max_threads(), SimdLevelName(ActiveSimdLevel()).c_str(), repeats);
  std::printf("%-24s %12s %12s %11s %10s %12s %11s %8s %8s\n", "kv cache", "bytes/token",
              "cache (GiB)", "ms / layer", "GB/s read", "ms / token", "cpu ms / l", "vs f32",
              "(cpu)");
  double f32_ms = 0, f32_cpu = 0;
  struct Case {
    KvType type;
    bool head_major;
    int keep;
  };
  const Case cases[] = {
      {KvType::kF32, true, 0},  {KvType::kBf16, true, 0},  {KvType::kF16, true, 0},
      {KvType::kQ8_0, true, 0}, {KvType::kQ4_0, true, 0},  {KvType::kQ4_0, true, 4},
      {KvType::kF32, false, 0}, {KvType::kQ8_0, false, 0}, {KvType::kQ4_0, false, 0}};
  bool all_equal = true;
  for (const Case c : cases) {
    const bool plain = c.type == KvType::kF32 && !c.head_major;  // the f32 cache itself
    const int panel = c.head_major ? KvPanelValues(c.type, Dh) : kv_row;
    const size_t row_bytes = KvRowBytes(c.type, kv_row), panel_bytes = KvRowBytes(c.type, panel);
    std::vector<float> f32k, f32v;
    std::vector<uint8_t> kb, vb;
    std::vector<int> kept_slot(entries, -1);
    std::vector<float> kept_k(static_cast<size_t>(std::max(c.keep, 1)) * kv_row),
        kept_v(static_cast<size_t>(std::max(c.keep, 1)) * kv_row);
    // What to check against: the dequantised keys and values (the f32 cache's own rows for it).
    std::vector<float> dk(plain ? 0 : static_cast<size_t>(entries) * kv_row), dv(dk.size());
    KvRows kr, vr;
    std::vector<float> row(kv_row);
    if (plain) {
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
        for (int kv = 0; kv < 2; ++kv) {
          for (float& x : row) x = dist(rng);
          std::vector<uint8_t>& bytes = kv == 0 ? kb : vb;
          float* decoded = (kv == 0 ? dk : dv).data() + static_cast<size_t>(r) * kv_row;
          if (r < c.keep) {
            std::copy(row.begin(), row.end(),
                      (kv == 0 ? kept_k : kept_v).begin() + static_cast<size_t>(r) * kv_row);
            std::copy(row.begin(), row.end(), decoded);
            continue;
          }
          for (int g = 0; g < kv_row / panel; ++g) {
            uint8_t* at = bytes.data() + (static_cast<size_t>(g) * entries + r) * panel_bytes;
            KvEncodeRow(c.type, row.data() + g * panel, panel, at);
            KvDecodeSlice(c.type, at, 0, panel, decoded + g * panel);
          }
        }
      }
      for (int r = 0; r < c.keep; ++r) kept_slot[r] = r;
      auto view = [&](KvRows* rows, const std::vector<uint8_t>& bytes,
                      const std::vector<float>& kept) {
        rows->type = c.type;
        rows->bytes = bytes.data();
        rows->row_bytes = panel_bytes;
        rows->panel_values = panel;
        rows->panel_bytes = static_cast<size_t>(entries) * panel_bytes;
        rows->kept_slot = c.keep ? kept_slot.data() : nullptr;
        rows->kept = kept.data();
      };
      view(&kr, kb, kept_k);
      view(&vr, vb, kept_v);
    }
    std::vector<float> out(H * Dh), ref(H * Dh);
    const int64_t first_index = static_cast<int64_t>(entries) * 3;  // the ring has wrapped
    double best = 1e30, best_cpu = 1e30;
    for (int i = 0; i < repeats + 1; ++i) {  // the first call warms the scratch buffers
      const auto t0 = std::chrono::steady_clock::now();
      const std::clock_t c0 = std::clock();
      SinkWindowAttention(q.data(), qs.data(), kr, vr, out.data(), 1, H, Hkv, Dh, sinks, window,
                          ring, first_index, AttnOptions{});
      const double cpu = 1000.0 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) best = std::min(best, ms), best_cpu = std::min(best_cpu, cpu);
    }
    SinkWindowAttention(q.data(), qs.data(), plain ? f32k.data() : dk.data(),
                        plain ? f32v.data() : dv.data(), ref.data(), 1, H, Hkv, Dh, sinks, window,
                        ring, first_index);
    const bool equal = out == ref;
    all_equal = all_equal && equal;
    if (c.type == KvType::kF32 && c.head_major) f32_ms = best, f32_cpu = best_cpu;
    const double bytes_per_token = 2.0 * layers * row_bytes;
    const double layer_bytes = 2.0 * entries * row_bytes;
    char name[48];
    std::snprintf(name, sizeof name, "%s%s %s", KvTypeName(c.type), c.keep ? "+first:4" : "",
                  c.head_major ? "head-major" : "row-major");
    std::printf("%-24s %12.0f %12.2f %11.2f %10.1f %12.0f %11.2f %7.2fx %7.2fx%s\n", name,
                bytes_per_token, bytes_per_token * entries / (1 << 30), best,
                layer_bytes / best / 1e6, best * layers, best_cpu, best / f32_ms,
                best_cpu / f32_cpu, equal ? "" : "  MISMATCH with f32 on the dequantised rows");
  }
  std::printf(
      "(cache: all %d layers' keys and values of %d entries; ms / layer: wall time, best of the "
      "repeats; ms / token: 32 layers' attention; cpu ms / l: the process's CPU time for a layer; "
      "vs f32: "
      "wall and CPU time against the f32 streaming cache's, f32 head-major)\n",
      layers, entries);
  std::printf("every case equals the f32 kernel on its dequantised rows bit for bit: %s\n",
              all_equal ? "yes" : "NO");
  return all_equal ? 0 : 1;
}
