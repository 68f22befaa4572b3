// --precision: which arithmetic the forward's matrix products use (weights.h, Precision).
//
// bf16 rounds x and W to bf16 (8 significant bits) and accumulates in f32 (kernels/gemm_bf16.h):
// on CPUs with AVX-512 BF16 about twice sgemm's rate. The projections (q, k, v, o, MLP, LM head)
// and the tiled attention's two products change; norms, RoPE, softmax and statistics stay f32, so
// the analysis metrics move by the bf16 rounding of the products' operands (README and
// docs/DESIGN.md give the measured differences). f32 is the default and the reference.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/weights.h"

namespace ss {

// "f32" or "bf16"; anything else is an ss::Error naming `flag`.
Precision ParsePrecision(const std::string& name, const std::string& flag = "--precision");
const char* PrecisionName(Precision p);

// Sets the model's precision: kBf16 packs every dense projection and the LM head once (about half
// the f32 weights' memory again); kF32 drops the packs. Idempotent. kF32 on a model loaded with
// bf16 weights only (model.bf16_only) is an ss::Error: the f32 weights are not there to return to.
void SetPrecision(Model& model, Precision p);

// Weights in bf16 from the start: a loader (io/load.h, LoadModel at Precision::kBf16) calls Bound
// on each tensor as it fills it; a dense projection (a layer's wq, wk, wv, wo, w1, w2, w3, or the
// LM head) is packed at once and its f32 tensor freed, so the model never holds its projections in
// f32 as a whole: peak memory is the packs (2 bytes a weight) plus one tensor in f32. A bf16
// checkpoint's values pass through f32 exactly and pack to the stored bits. Finish attaches the
// packs (packing a tied LM head from the embedding, which stays f32 for the lookup) and marks the
// model bf16_only at Precision::kBf16.
class Bf16Packer {
 public:
  explicit Bf16Packer(ModelWeights& weights);  // weights.layers already sized
  void Bound(Tensor* tensor);
  bool Packs(const Tensor* tensor) const { return slots_.count(tensor) > 0; }
  void Finish(Model& model);

 private:
  std::vector<std::shared_ptr<LayerBf16>> layers_;
  std::shared_ptr<PackedBf16> lm_head_;
  std::unordered_map<const Tensor*, PackedBf16*> slots_;
};

// A projection as f32: the tensor itself, or (bf16_only) unpacked from its bf16 pack. For the few
// analyses that read a weight directly (explain's per-head output directions).
Tensor ProjectionF32(const Tensor& f32, const PackedBf16* packed);

// One line for a user who asked for bf16 on a CPU without AVX-512 BF16 (the portable path gives
// the same rounding, slower than f32), or "" when the fast path is active or p is f32.
std::string PrecisionNote(Precision p);

}  // namespace ss
