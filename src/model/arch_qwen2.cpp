// Qwen2 / Qwen2.5 (Qwen2ForCausalLM, modeling_qwen2.py): the Llama layout and forward loop, with
// biases on the q, k and v projections (not on o_proj) and rotate-half RoPE in both Hugging Face
// and GGUF files (llama.cpp runs LLM_ARCH_QWEN2 with NEOX-style RoPE, so its converter does not
// permute q/k). Sliding windows per layer (use_sliding_window) are rejected at config parse.
#include "model/arch.h"

namespace ss {

TensorMap Qwen2Tensors(const ModelConfig& c, TensorNaming naming, ModelWeights& w) {
  TensorMap map = LlamaLayoutTensors(c, naming, w, /*input_norms=*/true);
  map.file_rope = RopeKind::kHalf;
  return map;
}

}  // namespace ss
