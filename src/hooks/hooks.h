// Named hook points on the forward pass, as TransformerLens names them (DESIGN.md "Hook points"):
//   hook_embed, blocks.{l}.hook_resid_pre, blocks.{l}.attn.hook_q|k|v,
//   blocks.{l}.attn.hook_pattern, blocks.{l}.attn.hook_z, blocks.{l}.hook_attn_out,
//   blocks.{l}.hook_resid_mid, blocks.{l}.hook_mlp_out, blocks.{l}.hook_resid_post,
//   ln_final.hook_normalized; attn.hook_gate on gated attention; on Gated DeltaNet layers
//   blocks.{l}.linear_attn.hook_out and blocks.{l}.linear_attn.hook_state.
// A hook receives the activation of the current forward call as a mutable tensor: observers read
// it, interventions write it (zero, mean, patch; per position and per head by slicing). With
// nothing attached the forward pass only tests one boolean per point.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace ss {

enum class HookPoint {
  kEmbed,      // (T, D)
  kResidPre,   // (T, D)
  kQ,          // (T, H, Dh) after RoPE
  kK,          // (T, Hkv, Dh) after RoPE
  kV,          // (T, Hkv, Dh)
  kPattern,    // (H, T, S) attention probabilities; S = keys visible in the cache
  kZ,          // (T, H, Dh) per-head attention output before the output projection
  kAttnOut,    // (T, D)
  kResidMid,   // (T, D)
  kMlpOut,     // (T, D)
  kResidPost,  // (T, D)
  kLnFinal,    // (T, D)
  kAttnGate,  // (T, H, Dh) the output gate sigmoid(x W_gate^T) z is multiplied by (gated attention)
  // Gated DeltaNet layers (model/linear_attn.cpp), in place of attn.*:
  kLinearOut,    // (T, nv, dv) the delta rule's output, before the gated norm
  kLinearState,  // (nv, dk, dv) the recurrent state after the call's last token
  kCount
};

// Where the current call sits: layer (-1 for hook_embed / ln_final) and the cache index of its
// first token (position `start + t` for token t of the call).
struct HookContext {
  HookPoint point;
  int layer;
  int start;
  std::string Name() const;
};

using HookFn = std::function<void(const HookContext& context, Tensor& activation)>;

class Hooks {
 public:
  // Attach to one point. layer = -1 with a per-layer point means every layer.
  void Add(HookPoint point, int layer, HookFn fn);
  // Attach by TransformerLens name ("blocks.3.attn.hook_pattern", "hook_embed"). Throws ss::Error
  // for an unknown name.
  void Add(const std::string& name, HookFn fn);
  void Clear();
  bool empty() const { return count_ == 0; }

  // Whether anything listens at (point, layer): the forward pass asks before building a view.
  bool Active(HookPoint point, int layer) const;
  void Run(HookPoint point, int layer, int start, Tensor& activation) const;

  static std::string Name(HookPoint point, int layer);
  // Parses a name into (point, layer); returns false if it is not a hook name.
  static bool Parse(const std::string& name, HookPoint* point, int* layer);

 private:
  struct Entry {
    HookPoint point;
    int layer;
    HookFn fn;
  };
  std::vector<Entry> entries_;
  std::array<bool, static_cast<int>(HookPoint::kCount)> any_{};
  int count_ = 0;
};

}  // namespace ss
