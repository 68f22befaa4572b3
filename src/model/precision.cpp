#include "model/precision.h"

#include <limits>

#include "common/error.h"
#include "common/file_util.h"
#include "kernels/dequant.h"
#include "kernels/vecmath.h"
#include "tensor/half.h"

namespace ss {

Precision ParsePrecision(const std::string& name, const std::string& flag) {
  if (name == "f32") return Precision::kF32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "q8_0") return Precision::kQ8_0;
  if (name == "native") return Precision::kNative;
  Fail("{}: expected f32, bf16, q8_0 or native, got '{}'", flag, name);
}

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kQ8_0:
      return "q8_0";
    case Precision::kNative:
      return "native";
    case Precision::kF32:
      break;
  }
  return "f32";
}

double BytesPerWeight(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return 2.0;
    case Precision::kQ8_0:
      return 1.0 + 4.0 / kQ8Block;
    case Precision::kNative:  // as stored: counted per tensor by the loader; f32 at most
    case Precision::kF32:
      break;
  }
  return 4.0;
}

PackedWeight PackWeight(const float* w, int out, int in, Precision p) {
  SS_ASSERT(p == Precision::kBf16 || p == Precision::kQ8_0);
  PackedWeight packed;
  // With x in int8 for Q8_0 (generate's default), the blocks are laid out for those products only.
  if (p == Precision::kQ8_0)
    packed.q8 =
        PackQ8_0(w, out, in,
                 GgmlActivationsFor(kGgmlTypeQ8_0) == GgmlActivations::kInt8 ? Q8Layout::kInt8
                                                                             : Q8Layout::kF32);
  else
    packed.bf16 = PackBf16(w, out, in);
  return packed;
}

namespace {

PackedWeight Pack(const Tensor& w, Precision p) {
  SS_ASSERT(w.rank() == 2);
  return PackWeight(w.data(), static_cast<int>(w.dim(0)), static_cast<int>(w.dim(1)), p);
}

}  // namespace

void SetPrecision(Model& model, Precision p) {
  if (model.packed_only && p != model.precision)
    Fail(
        "{}: the model was loaded with its projections in {} only (--precision {}); reload it "
        "to run at {}",
        model.source, PrecisionName(model.precision), PrecisionName(model.precision),
        PrecisionName(p));
  ModelWeights& w = model.weights;
  if (p != model.precision) {  // the packs, if any, are of another precision
    for (LayerWeights& l : w.layers) l.packed.reset();
    w.lm_head_packed.reset();
  }
  model.precision = p;
  // native on a model held in f32 (a llama2.c file, a trainer's checkpoint): the stored type is
  // f32.
  if (p == Precision::kF32 || p == Precision::kNative) return;
  for (LayerWeights& l : w.layers) {
    if (l.packed) continue;
    auto b = std::make_shared<LayerPacked>();
    if (!l.wq.empty()) {  // a Gated DeltaNet layer has no attention projections
      b->wq = Pack(l.wq, p);
      b->wk = Pack(l.wk, p);
      b->wv = Pack(l.wv, p);
      b->wo = Pack(l.wo, p);
    }
    for (auto [tensor, slot] : {std::pair{&l.lin_wq, &b->lin_wq},
                                {&l.lin_wk, &b->lin_wk},
                                {&l.lin_wv, &b->lin_wv},
                                {&l.lin_wz, &b->lin_wz},
                                {&l.lin_out, &b->lin_out}})
      if (!tensor->empty()) *slot = Pack(*tensor, p);  // Gated DeltaNet layers only
    if (!l.w1.empty()) b->w1 = Pack(l.w1, p);          // MoE layers have no dense MLP
    if (!l.w2.empty()) b->w2 = Pack(l.w2, p);
    if (!l.w3.empty()) b->w3 = Pack(l.w3, p);
    l.packed = std::move(b);
  }
  if (!w.lm_head_packed && !w.lm_head.empty())
    w.lm_head_packed = std::make_shared<PackedWeight>(Pack(w.lm_head, p));
}

WeightPacker::WeightPacker(ModelWeights& weights, Precision precision) : precision_(precision) {
  SS_ASSERT(precision != Precision::kF32);
  for (LayerWeights& l : weights.layers) {
    auto b = std::make_shared<LayerPacked>();
    for (auto [tensor, slot] : {std::pair{&l.wq, &b->wq},
                                {&l.wk, &b->wk},
                                {&l.wv, &b->wv},
                                {&l.wo, &b->wo},
                                {&l.w1, &b->w1},
                                {&l.w2, &b->w2},
                                {&l.w3, &b->w3},
                                {&l.lin_wq, &b->lin_wq},
                                {&l.lin_wk, &b->lin_wk},
                                {&l.lin_wv, &b->lin_wv},
                                {&l.lin_wz, &b->lin_wz},
                                {&l.lin_out, &b->lin_out}})
      slots_[tensor] = slot;
    // Experts are kept only as stored (native); at bf16 and q8_0 they stay f32 (weights.h).
    if (precision == Precision::kNative)
      for (auto [tensor, slot] :
           {std::pair{&l.moe_w1, &b->moe_w1}, {&l.moe_w2, &b->moe_w2}, {&l.moe_w3, &b->moe_w3}})
        slots_[tensor] = slot;
    layers_.push_back(std::move(b));
  }
  lm_head_ = std::make_shared<PackedWeight>();
  slots_[&weights.lm_head] = lm_head_.get();
  embedding_ = &weights.token_embedding;
}

void WeightPacker::Bound(Tensor* tensor, uint32_t stored_type) {
  const auto it = slots_.find(tensor);
  if (it == slots_.end() || tensor->empty()) return;
  if (precision_ != Precision::kNative) {
    *it->second = Pack(*tensor, precision_);
    *tensor = Tensor();
    return;
  }
  // native: what was stored as F32 stays f32; a typed tensor that reaches here could not be kept
  // as stored (a fused or reordered member) and is held as ggml F16 / BF16 rows, half its f32
  // size, multiplied with x in f32 as the stored types are.
  if (stored_type == kGgmlTypeF32 || tensor->rank() != 2) return;
  const bool f16 = stored_type == kGgmlTypeF16;
  const int64_t n = tensor->numel();
  auto rows = std::make_shared<std::vector<uint16_t>>(n);
  for (int64_t i = 0; i < n; ++i)
    (*rows)[i] = f16 ? F32ToF16((*tensor)[i]) : F32ToBF16((*tensor)[i]);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(rows->data());
  it->second->ggml = GgmlView(f16 ? kGgmlTypeF16 : kGgmlTypeBF16, static_cast<int>(tensor->dim(0)),
                              static_cast<int>(tensor->dim(1)), bytes, std::move(rows));
  *tensor = Tensor();
}

bool WeightPacker::KeepStored(Tensor* tensor, const std::string& what,
                              const std::vector<int64_t>& shape, const StoredTensor& stored) {
  const auto it = slots_.find(tensor);
  const bool embedding = tensor == embedding_;
  if (precision_ != Precision::kNative || (it == slots_.end() && !embedding) ||
      !GgmlMatMulSupports(stored.ggml_type))
    return false;
  // A projection (out, in), or a stack of experts (E, rows, in) as one matrix of E * rows rows.
  SS_ASSERT(shape.size() == 2 || (shape.size() == 3 && !embedding));
  const int64_t rows = shape.size() == 3 ? shape[0] * shape[1] : shape[0];
  if (rows > std::numeric_limits<int>::max())
    Fail("{}: {} rows are more than a matrix holds", what, rows);
  GgmlMatrix w = GgmlView(stored.ggml_type, static_cast<int>(rows), static_cast<int>(shape.back()),
                          stored.data, stored.owner, stored.row_step, stored.scales);
  if (const int64_t bad = GgmlFirstNonFinite(w); bad >= 0)
    Fail("{} ({}) {}", what, GgmlTypeName(stored.ggml_type), GgmlFaultReason(w, bad));
  // With x in int8 for the type, a projection's products read a packed copy of its rows
  // (PackForInt8), and the mapping's pages it was copied from are dropped from memory (the f32
  // path and the dequantising lookups map them again from the file if they are ever read). The
  // embedding keeps its rows for the lookup; a head tied to it is packed in Finish.
  if (!embedding && GgmlActivationsFor(w.type) == GgmlActivations::kInt8) {
    PackForInt8(&w);
    if (w.int8 != nullptr && stored.mapped) {
      ReleaseMappedPages(w.data, static_cast<size_t>(w.out - 1) * w.row_stride + w.row_bytes);
      if (w.scales)
        ReleaseMappedPages(w.scales, static_cast<size_t>(w.out - 1) * w.scale_stride +
                                         static_cast<size_t>(w.in) / kMxfp4Block);
    }
  }
  // The embedding's lookup dequantises the rows it needs (and a tied head multiplies them).
  (embedding ? embedding_stored_ : *it->second).ggml = std::move(w);
  *tensor = Tensor();
  return true;
}

void WeightPacker::PackLoaded(Model& model) {
  for (LayerWeights& l : model.weights.layers)
    for (Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3, &l.lin_wq, &l.lin_wk,
                      &l.lin_wv, &l.lin_wz, &l.lin_out})
      Bound(t);
  if (!model.config.tied_embeddings) Bound(&model.weights.lm_head);
  Finish(model);
}

void WeightPacker::Finish(Model& model) {
  ModelWeights& w = model.weights;
  SS_ASSERT(layers_.size() == w.layers.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    // Every bound projection was packed (its f32 emptied), except at native, where one stored as
    // F32 stays f32; an MoE layer has no dense MLP.
    SS_ASSERT(precision_ == Precision::kNative ||
              (l.wq.empty() && l.wk.empty() && l.wv.empty() && l.wo.empty() && l.w1.empty() &&
               l.w2.empty() && l.w3.empty() && l.lin_wq.empty() && l.lin_wk.empty() &&
               l.lin_wv.empty() && l.lin_wz.empty() && l.lin_out.empty()));
    w.layers[i].packed = layers_[i];
  }
  if (!embedding_stored_.empty())
    w.embedding_packed = std::make_shared<const PackedWeight>(embedding_stored_);
  if (lm_head_->empty() && precision_ == Precision::kNative) {
    // Tied to an embedding stored in a type the kernels multiply: the head reads those bytes, as
    // the lookup does. Stored as F32 (tied or not): the head stays f32.
    if (model.config.tied_embeddings && !embedding_stored_.empty()) {
      SS_ASSERT(w.lm_head.empty() && w.token_embedding.empty());
      *lm_head_ = embedding_stored_;
      if (GgmlActivationsFor(lm_head_->ggml.type) == GgmlActivations::kInt8)
        PackForInt8(&lm_head_->ggml);
    }
    SS_ASSERT(!lm_head_->empty() || !w.lm_head.empty());
  } else if (lm_head_->empty()) {  // tied: the head is the embedding, which stays f32
    SS_ASSERT(!w.lm_head.empty());
    *lm_head_ = Pack(w.lm_head, precision_);
    if (w.lm_head.data() != w.token_embedding.data()) w.lm_head = Tensor();
  }
  w.lm_head_packed = lm_head_->empty() ? nullptr : lm_head_;
  model.precision = precision_;
  model.packed_only = true;
}

Tensor ProjectionF32(const Tensor& f32, const PackedWeight* packed) {
  if (!f32.empty() || !packed) return f32;
  Tensor out = Tensor::Zeros({packed->out(), packed->in()});
  if (!packed->ggml.empty()) {
    DequantizeGgmlRows(packed->ggml, 0, packed->ggml.out, out.data());
    return out;
  }
  if (!packed->q8.empty()) {
    DequantizeQ8Rows(packed->q8, 0, packed->q8.out, out.data());
    return out;
  }
  const PackedBf16& p = packed->bf16;
  const int64_t panel_size = static_cast<int64_t>(p.pairs) * kBf16PanelWidth * 2;
  for (int row = 0; row < p.out; ++row) {
    const uint16_t* panel = p.data.data() + row / kBf16PanelWidth * panel_size;
    const int j = row % kBf16PanelWidth;
    for (int i = 0; i < p.in; ++i)
      out[static_cast<int64_t>(row) * p.in + i] =
          BF16ToF32(panel[(static_cast<int64_t>(i / 2) * kBf16PanelWidth + j) * 2 + i % 2]);
  }
  return out;
}

std::string ActivationsName(const Model& model) {
  const auto int8 = [](const PackedWeight& w) {
    return (!w.ggml.empty() && GgmlActivationsFor(w.ggml.type) == GgmlActivations::kInt8) ||
           Q8TakesInt8X(w.q8);
  };
  const ModelWeights& w = model.weights;
  bool any = w.lm_head_packed && int8(*w.lm_head_packed);
  for (const LayerWeights& l : w.layers)
    if (l.packed)
      for (const PackedWeight* p :
           {&l.packed->wq, &l.packed->wk, &l.packed->wv, &l.packed->wo, &l.packed->w1,
            &l.packed->w2, &l.packed->w3, &l.packed->moe_w1, &l.packed->moe_w2, &l.packed->moe_w3,
            &l.packed->lin_wq, &l.packed->lin_wk, &l.packed->lin_wv, &l.packed->lin_wz,
            &l.packed->lin_out})
        any = any || int8(*p);
  return any ? "int8" : "f32";
}

std::string PrecisionNote(Precision p) {
  if (p == Precision::kNative && GgmlKernelName(kGgmlTypeQ4_K) == std::string("portable"))
    return "--precision native: no vector kernel runs for the stored types (the CPU lacks AVX2 + "
           "FMA + F16C, or SINKSCOPE_SIMD=portable); the portable path gives the same numbers, "
           "slower";
  if (p == Precision::kQ8_0 && !Avx2FmaActive())
    return "--precision q8_0: no vector Q8_0 kernel runs (the CPU lacks AVX2 + FMA, or "
           "SINKSCOPE_SIMD=portable); the portable path gives the same numbers, slower";
  if (p != Precision::kBf16 || Bf16KernelActive()) return "";
  return "--precision bf16: no vector bf16 kernel runs (the CPU lacks AVX2 + FMA, or "
         "SINKSCOPE_SIMD="
         "portable); the portable path gives the same rounding but runs slower than f32";
}

}  // namespace ss
