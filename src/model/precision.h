// --precision: how the forward holds and multiplies the projections (weights.h, Precision).
//
// bf16 rounds x and W to bf16 (8 significant bits) and accumulates in f32 (kernels/gemm_bf16.h):
// on CPUs with AVX-512 BF16 about twice sgemm's rate. The projections (q, k, v, o, MLP, LM head)
// and the tiled attention's two products change; norms, RoPE, softmax and statistics stay f32, so
// the analysis metrics move by the bf16 rounding of the products' operands (docs/BENCHMARKS.md and
// docs/DESIGN.md give the measured differences).
// q8_0 holds the projections and the LM head as ggml Q8_0 blocks (kernels/gemm_q8.h: 1.125 bytes a
// weight); activations, attention and everything else stay f32, so the numbers are those of the
// f32 forward on the Q8_0-rounded weights. A Q8_0 GGUF file's blocks are kept as stored.
// native keeps each projection and the token embedding in the type the file stores them (F16, BF16,
// Q8_0, Q4_0, Q4_K, Q6_K: kernels/gemm_ggml.h), usually as a view of the file's mapping, with f32
// activations: the numbers are those of the f32 forward on the stored weights, and the memory is
// the file's. The embedding's lookup dequantises the rows it needs. A tensor stored as F32 (and a
// llama2.c file, all F32) stays f32.
// f32 is the reference. Without --precision the verbs run at the file's own precision (native, or
// f32 for a file that stores every weight as F32: io/load.h FilePrecision).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/dequant.h"
#include "model/tensor_map.h"
#include "model/weights.h"

namespace ss {

// "f32", "bf16", "q8_0" or "native"; anything else is an ss::Error naming `flag`.
Precision ParsePrecision(const std::string& name, const std::string& flag = "--precision");
const char* PrecisionName(Precision p);

// Sets the model's precision: kBf16 / kQ8_0 pack every dense projection and the LM head once
// (about half / a quarter of the f32 weights' memory again); kF32 drops the packs. Idempotent.
// Changing the precision of a model loaded packed only (model.packed_only) is an ss::Error: the f32
// weights are not there to pack from.
void SetPrecision(Model& model, Precision p);

// The projection W (out, in) in precision p (kBf16 or kQ8_0).
PackedWeight PackWeight(const float* w, int out, int in, Precision p);
// Bytes a weight takes in precision p: 4, 2, 1.125.
double BytesPerWeight(Precision p);

// Packed weights from the start: a loader (io/load.h, LoadModel at kBf16 or kQ8_0) calls Bound on
// each tensor as it fills it; a dense projection (a layer's wq, wk, wv, wo, w1, w2, w3, or the LM
// head) is packed at once and its f32 tensor freed, so the model never holds its projections in
// f32 as a whole: peak memory is the packs plus one tensor in f32. A bf16 checkpoint's values pass
// through f32 exactly and pack to the stored bits; a Q8_0 GGUF tensor's re-quantise to its stored
// blocks (kernels/gemm_q8.h). Finish attaches the packs (packing a tied LM head from the
// embedding, which stays f32 for the lookup) and marks the model packed_only at the precision.
class WeightPacker {
 public:
  WeightPacker(ModelWeights& weights, Precision precision);  // weights.layers already sized
  // `stored_type`: the ggml type the file stores the tensor in. At native a projection that could
  // not stay in its stored bytes (the map split or transformed it) is held as ggml F16 rows when
  // stored as F16, BF16 rows when stored in any other type but F32 (exact for BF16; 8 bits of
  // mantissa over a block type's rounding), x in f32 as for the stored types; stored as F32, it
  // stays f32.
  void Bound(Tensor* tensor, uint32_t stored_type = kGgmlTypeF32);
  // At native: keeps a projection or the token embedding in its stored bytes (a view that
  // `stored.owner` keeps alive) when MatMulGgml multiplies its type; `what` names the tensor in
  // errors (a non-finite value or scale, checked here).
  bool KeepStored(Tensor* tensor, const std::string& what, const std::vector<int64_t>& shape,
                  const StoredTensor& stored);
  // Whether `tensor` is a projection (or, at native, the embedding) this packer may take.
  bool Packs(const Tensor* tensor) const {
    return slots_.count(tensor) > 0 || (precision_ == Precision::kNative && tensor == embedding_);
  }
  void Finish(Model& model);
  // For a model loaded whole in f32 (llama2.c files): packs every projection, frees its f32
  // tensor and finishes.
  void PackLoaded(Model& model);

 private:
  Precision precision_;
  std::vector<std::shared_ptr<LayerPacked>> layers_;
  std::shared_ptr<PackedWeight> lm_head_;
  // native: the token embedding as stored (its lookup and a head tied to it read these bytes).
  const Tensor* embedding_ = nullptr;
  PackedWeight embedding_stored_;
  std::unordered_map<const Tensor*, PackedWeight*> slots_;
};

// A projection as f32: the tensor itself, or (packed_only) unpacked from its pack. For the few
// analyses that read a weight directly (explain's per-head output directions).
Tensor ProjectionF32(const Tensor& f32, const PackedWeight* packed);

// One line for a user who asked for bf16 on a CPU without AVX-512 BF16 (the portable path gives
// the same rounding, slower than f32), or "" when the fast path is active or p is f32.
std::string PrecisionNote(Precision p);

// "int8" where some product of the model takes x rounded to int8 (native weights of a type
// chosen for it: --activations, kernels/gemm_ggml.h GgmlActivations), else "f32".
std::string ActivationsName(const Model& model);

}  // namespace ss
