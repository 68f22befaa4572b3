// --precision: which arithmetic the forward's matrix products use (weights.h, Precision).
//
// bf16 rounds x and W to bf16 (8 significant bits) and accumulates in f32 (kernels/gemm_bf16.h):
// on CPUs with AVX-512 BF16 about twice sgemm's rate. The projections (q, k, v, o, MLP, LM head)
// and the tiled attention's two products change; norms, RoPE, softmax and statistics stay f32, so
// the analysis metrics move by the bf16 rounding of the products' operands (README and
// docs/DESIGN.md give the measured differences). f32 is the default and the reference.
#pragma once

#include <string>

#include "model/weights.h"

namespace ss {

// "f32" or "bf16"; anything else is an ss::Error naming `flag`.
Precision ParsePrecision(const std::string& name, const std::string& flag = "--precision");
const char* PrecisionName(Precision p);

// Sets the model's precision: kBf16 packs every dense projection and the LM head once (about half
// the f32 weights' memory again); kF32 drops the packs. Idempotent.
void SetPrecision(Model& model, Precision p);

// One line for a user who asked for bf16 on a CPU without AVX-512 BF16 (the portable path gives
// the same rounding, slower than f32), or "" when the fast path is active or p is f32.
std::string PrecisionNote(Precision p);

}  // namespace ss
