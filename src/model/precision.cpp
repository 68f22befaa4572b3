#include "model/precision.h"

#include "common/error.h"

namespace ss {

Precision ParsePrecision(const std::string& name, const std::string& flag) {
  if (name == "f32") return Precision::kF32;
  if (name == "bf16") return Precision::kBf16;
  Fail("{}: expected f32 or bf16, got '{}'", flag, name);
}

const char* PrecisionName(Precision p) { return p == Precision::kBf16 ? "bf16" : "f32"; }

namespace {

PackedBf16 Pack(const Tensor& w) {
  SS_ASSERT(w.rank() == 2);
  return PackBf16(w.data(), static_cast<int>(w.dim(0)), static_cast<int>(w.dim(1)));
}

}  // namespace

void SetPrecision(Model& model, Precision p) {
  model.precision = p;
  ModelWeights& w = model.weights;
  if (p == Precision::kF32) {
    for (LayerWeights& l : w.layers) l.bf16.reset();
    w.lm_head_bf16.reset();
    return;
  }
  for (LayerWeights& l : w.layers) {
    if (l.bf16) continue;
    auto b = std::make_shared<LayerBf16>();
    b->wq = Pack(l.wq);
    b->wk = Pack(l.wk);
    b->wv = Pack(l.wv);
    b->wo = Pack(l.wo);
    if (!l.w1.empty()) b->w1 = Pack(l.w1);  // MoE layers have no dense MLP
    if (!l.w2.empty()) b->w2 = Pack(l.w2);
    if (!l.w3.empty()) b->w3 = Pack(l.w3);
    l.bf16 = std::move(b);
  }
  if (!w.lm_head_bf16 && !w.lm_head.empty()) w.lm_head_bf16 = std::make_shared<PackedBf16>(Pack(w.lm_head));
}

std::string PrecisionNote(Precision p) {
  if (p != Precision::kBf16 || Bf16KernelActive()) return "";
  return CpuHasAvx512Bf16()
             ? "--precision bf16: the AVX-512 BF16 kernel is disabled (SINKSCOPE_SIMD); the portable "
               "path gives the same rounding but runs slower than f32"
             : "--precision bf16: this CPU lacks AVX-512 BF16; the portable path gives the same "
               "rounding but runs slower than f32";
}

}  // namespace ss
