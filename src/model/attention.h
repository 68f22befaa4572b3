// Attention variants: what a model's attention adds to plain causal softmax attention, and what
// the trainer's `attention` setting names. Each variant is one unit, model/attn_<file>.cpp, that
// holds everything about it:
//   - its names: the trainer's (attention=<name>), the ModelConfig flag and the config.json / GGUF
//     key that marks it, its tensors' names in both formats, inspect's description;
//   - its row weights (an AttnRule, kernels/attn_rule.h: forward for the kernels and the trainer in
//     float and double, the tiled kernel's online form, the backward, the fused statistics);
//   - its parameters (shape, the trainer's init and decay) and the ops it adds around the
//     attention (slot logits from the query, an output gate), forward and backward, templated on
//     the scalar so that the engine (model/blocks.cpp) and the trainer (train/train_model.cpp) run
//     the same definitions.
// The build collects the unit files (attn_variants.inc); the engine, the trainer, the config
// readers and writers (model/family.cpp), the tensor map (arch_llama.cpp), inspect and the Python
// module reach the variants only through this registry.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kernels/attn_rule.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/family.h"
#include "model/tensor_map.h"
#include "model/weights.h"

namespace ss {

// The shapes a variant's ops see: B sequences of T tokens (N = B * T rows; the engine has B = 1),
// H query heads reading Hkv kv heads of Dh values, model width D.
struct AttnShape {
  int B = 1, T = 0, H = 0, Hkv = 0, Dh = 0, D = 0;
};

// A tensor a variant adds to every layer.
struct AttnParam {
  const char* hf;                                     // after "model.layers.N.": "self_attn.sinks"
  const char* gguf;                                   // after "blk.N.": "attn_sinks.weight"
  enum class Shape { kHeads, kKvRows, kGate } shape;  // (H), (Hkv*Dh), (H*Dh, D)
  Tensor LayerWeights::*field;                        // where a loaded model keeps it
  bool rope_rows = false;  // its dims follow q's RoPE order: permuted with q_proj when exported
  bool decay = false;      // the trainer's AdamW decays it
  bool zero_init = true;   // the trainer starts it at 0, else N(0, init_std)
};
std::vector<int64_t> AttnParamShape(AttnParam::Shape shape, const AttnShape& s);

// Where a row's slot column gets its logit: none; one learned logit per head (the variant's first
// parameter); or one per query, computed from the query by AttnOps::slot_logits.
enum class AttnSlot { kNone, kPerHead, kPerQuery };

// The ops a variant adds around the attention of one layer, in one scalar type. `params` are the
// layer's tensors in AttnVariant::params order, `dparams` their gradients (added to).
template <typename Real>
struct AttnOps {
  // Slot logits (B, H, T) [(b * H + h) * T + t] of the queries q (B * T, H * Dh) after their norm,
  // before RoPE; and the backward: d_slot (B, H, T) into dq (added) and dparams.
  void (*slot_logits)(const Real* const* params, const Real* q, Real* out,
                      const AttnShape& s) = nullptr;
  void (*slot_logits_backward)(const Real* const* params, const Real* q, const Real* d_slot,
                               Real* dq, Real* const* dparams, const AttnShape& s) = nullptr;
  // An output gate: g (n) holds the gate projection's output on entry and the gate on exit; the
  // heads' output z is then multiplied by it before W_O. Backward from dL/dz' (dz, z' = z * g):
  // dz becomes dL/dz and d_pre receives dL/d(gate projection output).
  void (*gate)(Real* g, int64_t n) = nullptr;
  void (*gate_backward)(const Real* g, const Real* z, Real* dz, Real* d_pre, int64_t n) = nullptr;
};

struct AttnVariant {
  const char* name;     // the trainer's attention=<name>
  const char* feature;  // inspect's description of a model with it; null: plain softmax
  // The ModelConfig flag that marks a model with it (null: plain softmax) and that flag's name
  // (the Python module's Model.config key). Two variants may share one flag when they differ only
  // in training (softmax1 is sink-logit with the logits frozen at 0): the first listed reads and
  // writes it.
  bool ModelConfig::*flag;
  const char* flag_name;
  Key key;                    // the flag in config.json / GGUF (sinkscope's extension keys)
  const char* gguf_tensor;    // GGUF: the flag is the presence of this tensor instead (or null)
  const AttnRule& (*rule)();  // the row weights
  AttnSlot slot = AttnSlot::kNone;
  int slot_value = -1;  // index into params of the slot's value (Hkv*Dh), or -1
  int gate_param = -1;  // index into params of the output gate's projection (H*Dh, D), or -1
  bool frozen = false;  // the trainer never updates its parameters (softmax1)
  std::vector<AttnParam> params;
  AttnOps<float> f32;
  AttnOps<double> f64;

  template <typename Real>
  const AttnOps<Real>& Ops() const {
    if constexpr (std::is_same_v<Real, float>)
      return f32;
    else
      return f64;
  }
};

// Every variant, plain softmax first.
std::span<const AttnVariant* const> AttnVariants();
// The variant the trainer's attention=<name> names; throws ss::Error naming `source` and listing
// the names for an unknown one.
const AttnVariant& FindAttnVariant(std::string_view name, const std::string& source);
// "softmax, softmax1, ... or sigmoid": the trainer's names, for messages.
std::string AttnVariantNames();
// The variant a model's configuration uses (plain softmax when no flag is set).
const AttnVariant& ModelAttention(const ModelConfig& c);

// ---- The model (config readers and writers, the tensor map, the engine).
// Reads every variant's flag (model/family.h's ReadLlamaCore). Two variants in one model are
// refused naming both keys.
void ReadAttentionVariant(const ConfigReader& r, ModelConfig* c);
// Writes the model's variant flag, unless it is the family's own (`native`: gpt-oss's sinks).
void WriteAttentionVariant(const ModelConfig& c, ConfigWriter& w, bool ModelConfig::*native);
// Appends layer `layer`'s variant tensors to a tensor map.
void AppendAttentionTensors(const ModelConfig& c, TensorNaming naming, int layer, LayerWeights& lw,
                            std::vector<TensorSpec>& specs);
// The layer's tensors of the variant as plain pointers (null where a tensor is empty).
std::vector<const float*> AttnParamData(const AttnVariant& v, const LayerWeights& lw);
// A layer's AttnOptions: window, soft-cap, the rule, and the slot (the per-head sink logits of
// `lw`, or `slot_logits` (H, T) computed by the variant's ops, with its values).
AttnOptions LayerAttnOptions(const ModelConfig& c, const LayerWeights& lw, int window,
                             const float* slot_logits);

// ---- The trainer (templates instantiated for float and double in attention.cpp).
// A per-head slot (kPerHead): its logits broadcast to (B, H, T), and the backward, summed per
// (sequence, head) over the queries, then over the sequences in order (thread-count independent).
template <typename Real>
void BroadcastHeadSlot(const Real* logits, Real* out, const AttnShape& s);
template <typename Real>
void HeadSlotBackward(const Real* d_slot, Real* d_logits, const AttnShape& s);

}  // namespace ss
