// Qwen2 / Qwen2.5 (Qwen2ForCausalLM, modeling_qwen2.py): the Llama layout and forward loop, with
// biases on the q, k and v projections (not on o_proj) and rotate-half RoPE in both Hugging Face
// and GGUF files (llama.cpp runs LLM_ARCH_QWEN2 with NEOX-style RoPE, so its converter does not
// permute q/k). With use_sliding_window, layers from max_window_layers on slide (config.json
// only: llama.cpp has no key for the window).
#include "model/arch.h"

namespace ss {

namespace {

TensorMap Qwen2Tensors(const ModelConfig& c, TensorNaming naming, ModelWeights& w) {
  TensorMap map = LlamaLayoutTensors(c, naming, w, /*input_norms=*/true);
  map.file_rope = RopeKind::kHalf;
  return map;
}

void ReadQwen2(const ConfigReader& r, const FamilyDefaults& d, ModelConfig* c) {
  ReadLlamaCore(r, d, 0, c);
  c->qkv_bias = true;  // Qwen2Attention: q/k/v_proj bias=True, o_proj bias=False, no key
  ReadQwenSlidingWindow(r, c);
}

void WriteQwen2(const ModelConfig& c, ConfigWriter& w) {
  WriteLlamaCore(c, w);
  WriteQwenSlidingWindow(c, w);
}

}  // namespace

std::span<const ArchEntry> Families_qwen2() {
  static const ArchEntry families[] = {
      {"qwen2",
       "Qwen2ForCausalLM",
       "qwen2",
       "Qwen2 / Qwen2.5: the Llama layout with q/k/v biases",
       {false, 1e-6f, 10000.0f, 32768, -1, -1},
       &ReadQwen2,
       &WriteQwen2,
       &Qwen2Tensors,
       &ForwardSequential},
  };
  return families;
}

}  // namespace ss
