// Reader for llama2.c model files (Karpathy's llama2.c, run.c / export.py).
//
// Legacy format ("version 0", what stories260K.bin uses):
//   int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len   (28 bytes)
//     vocab_size < 0 means the classifier is NOT shared with the embedding (|vocab_size| tokens).
//   float32 arrays, in order:
//     token_embedding (V, D), rms_att (L, D), wq (L, D, D), wk (L, kv_dim, D), wv (L, kv_dim, D),
//     wo (L, D, D), rms_ffn (L, D), w1 (L, F, D), w2 (L, D, F), w3 (L, F, D), rms_final (D),
//     freq_cis_real (seq_len, Dh/2), freq_cis_imag (seq_len, Dh/2)   (unused: RoPE is recomputed),
//     wcls (V, D) only when unshared.
// Version 1 ("ak42" header, export.py version1_export): uint32 magic 0x616b3432, int32 version = 1,
//   the seven int32 above, uint8 shared_classifier, zero padding to 256 bytes; then float32
//   rms_att (L, D), rms_ffn (L, D), rms_final (D), token_embedding (V, D), wq, wk, wv, wo, w1, w2,
//   w3 (each for all layers), wcls (V, D) only when unshared.
// Version 2 (Q8_0 group-quantised) is recognised and rejected with a clear message.
// The file size must equal what the header implies, to the byte.
#pragma once

#include <string>

#include "model/weights.h"

namespace ss {

// Loads a llama2.c model; throws ss::Error naming the file and what is wrong.
Model LoadLlama2c(const std::string& path);

// True if the file starts like a llama2.c model (used to choose a reader by content).
bool LooksLikeLlama2c(const std::string& path);

}  // namespace ss
