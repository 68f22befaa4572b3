#include "model/precision.h"

#include "common/error.h"
#include "tensor/half.h"

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
  if (p == Precision::kF32 && model.bf16_only)
    Fail("{}: the model was loaded with its projections in bf16 only (--precision bf16); "
         "reload it to run at f32",
         model.source);
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

Bf16Packer::Bf16Packer(ModelWeights& weights) {
  for (LayerWeights& l : weights.layers) {
    auto b = std::make_shared<LayerBf16>();
    for (auto [tensor, slot] : {std::pair{&l.wq, &b->wq}, {&l.wk, &b->wk}, {&l.wv, &b->wv},
                                {&l.wo, &b->wo}, {&l.w1, &b->w1}, {&l.w2, &b->w2}, {&l.w3, &b->w3}})
      slots_[tensor] = slot;
    layers_.push_back(std::move(b));
  }
  lm_head_ = std::make_shared<PackedBf16>();
  slots_[&weights.lm_head] = lm_head_.get();
}

void Bf16Packer::Bound(Tensor* tensor) {
  const auto it = slots_.find(tensor);
  if (it == slots_.end() || tensor->empty()) return;
  *it->second = Pack(*tensor);
  *tensor = Tensor();
}

void Bf16Packer::Finish(Model& model) {
  ModelWeights& w = model.weights;
  SS_ASSERT(layers_.size() == w.layers.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    // Every bound projection was packed (its f32 emptied); an MoE layer has no dense MLP.
    SS_ASSERT(l.wq.empty() && l.wk.empty() && l.wv.empty() && l.wo.empty() && l.w1.empty() &&
              l.w2.empty() && l.w3.empty());
    w.layers[i].bf16 = layers_[i];
  }
  if (lm_head_->data.empty()) {  // tied: the head is the embedding, which stays f32
    SS_ASSERT(!w.lm_head.empty());
    *lm_head_ = Pack(w.lm_head);
    if (w.lm_head.data() != w.token_embedding.data()) w.lm_head = Tensor();
  }
  w.lm_head_bf16 = lm_head_;
  model.precision = Precision::kBf16;
  model.bf16_only = true;
}

Tensor ProjectionF32(const Tensor& f32, const PackedBf16* packed) {
  if (!f32.empty() || !packed) return f32;
  Tensor out = Tensor::Zeros({packed->out, packed->in});
  const int64_t panel_size = static_cast<int64_t>(packed->pairs) * kBf16PanelWidth * 2;
  for (int row = 0; row < packed->out; ++row) {
    const uint16_t* panel = packed->data.data() + row / kBf16PanelWidth * panel_size;
    const int j = row % kBf16PanelWidth;
    for (int i = 0; i < packed->in; ++i)
      out[static_cast<int64_t>(row) * packed->in + i] =
          BF16ToF32(panel[(static_cast<int64_t>(i / 2) * kBf16PanelWidth + j) * 2 + i % 2]);
  }
  return out;
}

std::string PrecisionNote(Precision p) {
  if (p != Precision::kBf16 || Bf16KernelActive()) return "";
  return "--precision bf16: no vector bf16 kernel runs (the CPU lacks AVX2 + FMA, or SINKSCOPE_SIMD="
         "portable); the portable path gives the same rounding but runs slower than f32";
}

}  // namespace ss
