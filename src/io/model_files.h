// Hugging Face directories and GGUF files as whole models: config + tensors through the family's
// tensor-name map (model/arch.h), in both directions.
//
// Reading:
//   - HF: config.json (io/hf_config.h) and model.safetensors or a sharded index
//     (io/safetensors.h). F32 tensors are zero-copy views of the read-only memory map; F16/BF16
//     are converted to float32 at load.
//   - GGUF: the `<arch>.*` hyperparameters and the tensors, every tensor dequantised to float32
//     at load (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K): memory use is that of an f32 model.
// Readers keep q/k rows in the file's RoPE pair order and set config.rope to match (GGUF llama:
// interleaved, everything else rotate-half), so nothing is permuted at load. Writers permute the
// rows when the model's order differs from the target file's.
#pragma once

#include <cstdint>
#include <string>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/safetensors.h"
#include "kernels/dequant.h"
#include "model/weights.h"

namespace ss {

// At Precision::kBf16 the projections are packed as they load and never held in f32 as a whole
// (Model::packed_only, model/precision.h); at kF32 every weight is f32.
Model LoadHfModel(const std::string& dir, Precision precision = Precision::kF32);
Model LoadGgufModel(const std::string& path, Precision precision = Precision::kF32);
// From an already opened GGUF file (the model keeps the file's map alive only through the
// tensors it copies: dequantisation always copies).
Model LoadGgufModel(const GgufFile& gguf, Precision precision = Precision::kF32);

// The config a model gets when written in Hugging Face layout: config.rope becomes rotate-half
// (the q/k rows are permuted by WriteHfModel), torch_dtype follows `dtype`. Throws ss::Error if
// the config cannot be written as config.json.
ModelConfig HfConfigFor(const Model& model, SafetensorsDtype dtype);
// Writes `dir`/model.safetensors and `dir`/config.json (the directory must exist). Each file is
// written atomically; the caller makes the directory as a whole appear atomically.
void WriteHfModel(const Model& model, const std::string& dir, SafetensorsDtype dtype);

// Adds general.architecture, the `<arch>.*` hyperparameters and every tensor to `writer`.
// `ggml_type` (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K) applies to 2-D weights; 1-D tensors (norms,
// biases), gpt-oss's 2-D expert biases and the MoE router (ffn_gate_inp, as llama.cpp's quantiser
// keeps it) stay F32, and the stacked (3-D) expert weights are
// written in `expert_type` (F32 by default, as llama.cpp's converters write them, or any of the
// types above, or MXFP4). A weight whose rows are not whole blocks of its type falls back, on its
// own, to Q8_0 (rows of a multiple of 32) or else F16 (MXFP4 experts: F16). MXFP4 as `ggml_type` is
// llama.cpp's MXFP4_MOE (llama-quant.cpp: tensors with ne[2] > 1 in MXFP4, the others in Q8_0):
// experts in MXFP4, the other 2-D weights in Q8_0. The tokenizer is added separately
// (tokenizer/export.h). The model's weights must be in f32 (loaded at f32).
void AddGgufModel(const Model& model, GgufWriter& writer, uint32_t ggml_type,
                  uint32_t expert_type = kGgmlTypeF32);

}  // namespace ss
