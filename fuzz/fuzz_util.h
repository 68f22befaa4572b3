// Helpers shared by the fuzz targets: a scratch directory for readers that take a path rather than
// bytes, and touching every byte range a loader hands out, so AddressSanitizer checks its bounds.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "model/weights.h"

namespace ss::fuzz {

// A directory of this process's own (removed at exit) under $SINKSCOPE_FUZZ_TMPDIR, else /dev/shm
// where it exists (a file a run is written and read back thousands of times a second: on a
// disk-backed /tmp the slow targets ran 3x slower), else $TMPDIR or /tmp. Held by a pointer that is
// never freed, so the exit handler that removes it cannot run after the string is destroyed.
inline const std::string& ScratchDir() {
  static const std::string* const dir = [] {
    std::string base = "/tmp";
    if (const char* tmp = std::getenv("TMPDIR"); tmp && *tmp) base = tmp;
    if (access("/dev/shm", W_OK) == 0) base = "/dev/shm";
    if (const char* own = std::getenv("SINKSCOPE_FUZZ_TMPDIR"); own && *own) base = own;
    std::string pattern = base + "/sinkscope-fuzz-XXXXXX";
    if (!mkdtemp(pattern.data())) std::abort();
    std::atexit([] { std::filesystem::remove_all(*dir); });
    return new std::string(pattern);
  }();
  return *dir;
}

// Writes `data` to ScratchDir()/name (replacing it) and returns the path.
inline std::string WriteScratchFile(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = ScratchDir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

// Reads the first and last float of a tensor (nothing for an empty handle).
inline void Touch(const Tensor& t) {
  if (t.empty() || t.numel() == 0) return;
  volatile float first = t.data()[0], last = t.data()[t.numel() - 1];
  (void)first;
  (void)last;
}

inline void TouchWeights(const Model& model) {
  const ModelWeights& w = model.weights;
  for (const Tensor* t : {&w.token_embedding, &w.final_norm, &w.final_norm_bias, &w.lm_head,
                          &w.position_embedding, &w.rope_freq_factors})
    Touch(*t);
  for (const LayerWeights& l : w.layers)
    for (const Tensor* t :
         {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w1, &l.w2, &l.w3})
      Touch(*t);
}

}  // namespace ss::fuzz
