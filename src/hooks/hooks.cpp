#include "hooks/hooks.h"

#include <cstdlib>

namespace ss {

namespace {

struct PointName {
  HookPoint point;
  const char* suffix;  // after "blocks.{l}." for per-layer points
  bool per_layer;
};

constexpr PointName kPointNames[] = {
    {HookPoint::kEmbed, "hook_embed", false},
    {HookPoint::kResidPre, "hook_resid_pre", true},
    {HookPoint::kQ, "attn.hook_q", true},
    {HookPoint::kK, "attn.hook_k", true},
    {HookPoint::kV, "attn.hook_v", true},
    {HookPoint::kPattern, "attn.hook_pattern", true},
    {HookPoint::kZ, "attn.hook_z", true},
    {HookPoint::kAttnOut, "hook_attn_out", true},
    {HookPoint::kResidMid, "hook_resid_mid", true},
    {HookPoint::kMlpOut, "hook_mlp_out", true},
    {HookPoint::kResidPost, "hook_resid_post", true},
    {HookPoint::kLnFinal, "ln_final.hook_normalized", false},
    {HookPoint::kAttnGate, "attn.hook_gate", true},
    {HookPoint::kLinearOut, "linear_attn.hook_out", true},
    {HookPoint::kLinearState, "linear_attn.hook_state", true},
};

}  // namespace

std::string Hooks::Name(HookPoint point, int layer) {
  for (const auto& pn : kPointNames) {
    if (pn.point != point) continue;
    if (!pn.per_layer) return pn.suffix;
    return "blocks." + std::to_string(layer) + "." + pn.suffix;
  }
  return "?";
}

std::string HookContext::Name() const { return Hooks::Name(point, layer); }

bool Hooks::Parse(const std::string& name, HookPoint* point, int* layer) {
  for (const auto& pn : kPointNames) {
    if (!pn.per_layer && name == pn.suffix) {
      *point = pn.point;
      *layer = -1;
      return true;
    }
  }
  const std::string prefix = "blocks.";
  if (name.rfind(prefix, 0) != 0) return false;
  size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return false;
  std::string number = name.substr(prefix.size(), dot - prefix.size());
  // The layer as Name() writes it: decimal, no leading zero, within an int (atoi would wrap
  // "4294967295" to -1, every layer).
  if (number.size() > 9 || (number.size() > 1 && number[0] == '0')) return false;
  for (char c : number)
    if (c < '0' || c > '9') return false;
  std::string suffix = name.substr(dot + 1);
  for (const auto& pn : kPointNames) {
    if (pn.per_layer && suffix == pn.suffix) {
      *point = pn.point;
      *layer = std::atoi(number.c_str());
      return true;
    }
  }
  return false;
}

void Hooks::Add(HookPoint point, int layer, HookFn fn) {
  entries_.push_back({point, layer, std::move(fn)});
  any_[static_cast<int>(point)] = true;
  ++count_;
}

void Hooks::Add(const std::string& name, HookFn fn) {
  HookPoint point;
  int layer;
  if (!Parse(name, &point, &layer))
    Fail("unknown hook point '{}' (expected e.g. hook_embed, blocks.0.attn.hook_pattern)", name);
  Add(point, layer, std::move(fn));
}

void Hooks::Clear() {
  entries_.clear();
  any_.fill(false);
  count_ = 0;
}

bool Hooks::Active(HookPoint point, int layer) const {
  if (!any_[static_cast<int>(point)]) return false;
  for (const auto& e : entries_)
    if (e.point == point && (e.layer < 0 || e.layer == layer)) return true;
  return false;
}

void Hooks::Run(HookPoint point, int layer, int start, Tensor& activation) const {
  if (!any_[static_cast<int>(point)]) return;
  HookContext context{point, layer, start};
  for (const auto& e : entries_)
    if (e.point == point && (e.layer < 0 || e.layer == layer)) e.fn(context, activation);
}

}  // namespace ss
