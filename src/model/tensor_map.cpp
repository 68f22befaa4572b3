#include "model/tensor_map.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "common/error.h"
#include "kernels/dequant.h"

namespace ss {
namespace {

int64_t RowWidth(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::vector<int64_t> StoredShape(const TensorSpec& spec) {
  std::vector<int64_t> shape = spec.shape;
  if (spec.transposed) {
    SS_ASSERT(shape.size() == 2);
    std::swap(shape[0], shape[1]);
  }
  return shape;
}

// Splits the rows of `t` (PyTorch order) into the spec's targets.
void SplitFused(const TensorSpec& spec, const Tensor& t) {
  const int64_t width = RowWidth(t.shape());
  const size_t parts = spec.fused_rows.size();
  SS_ASSERT(parts == spec.targets.size());
  for (size_t i = 0; i < parts; ++i) {
    std::vector<int64_t> shape = t.shape();
    shape[0] = spec.fused_groups * spec.fused_rows[i];
    *spec.targets[i] = Tensor::Zeros(shape);
  }
  const float* src = t.data();
  for (int g = 0; g < spec.fused_groups; ++g) {
    for (size_t i = 0; i < parts; ++i) {
      const int64_t n = spec.fused_rows[i] * width;
      std::memcpy(spec.targets[i]->data() + g * n, src, sizeof(float) * n);
      src += n;
    }
  }
}

Tensor JoinFused(const TensorSpec& spec) {
  std::vector<int64_t> shape = spec.shape;
  Tensor out = Tensor::Zeros(shape);
  const int64_t width = RowWidth(shape);
  float* dst = out.data();
  for (int g = 0; g < spec.fused_groups; ++g) {
    for (size_t i = 0; i < spec.fused_rows.size(); ++i) {
      const int64_t n = spec.fused_rows[i] * width;
      std::memcpy(dst, spec.targets[i]->data() + g * n, sizeof(float) * n);
      dst += n;
    }
  }
  return out;
}

}  // namespace

TensorSpec Spec(std::string name, std::vector<Tensor*> targets, std::vector<int64_t> shape) {
  TensorSpec spec;
  spec.name = std::move(name);
  spec.targets = std::move(targets);
  spec.shape = std::move(shape);
  return spec;
}

Tensor Transposed(const Tensor& w) {
  SS_ASSERT(w.rank() == 2);
  const int64_t rows = w.dim(0), cols = w.dim(1);
  Tensor out = Tensor::Zeros({cols, rows});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = w[r * cols + c];
  return out;
}

Tensor PermuteRopeRows(const Tensor& w, int n_heads, int head_dim, int rot_dim, RopeKind from,
                       RopeKind to) {
  SS_ASSERT(w.dim(0) == static_cast<int64_t>(n_heads) * head_dim);
  Tensor out = w.Copy();
  if (from == to || from == RopeKind::kNone || to == RopeKind::kNone) return out;
  const int64_t width = RowWidth(w.shape());
  const int half = rot_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    for (int i = 0; i < half; ++i) {
      for (int j = 0; j < 2; ++j) {
        // Row 2i + j of the interleaved order is row j * half + i of the rotate-half order.
        const int64_t interleaved = static_cast<int64_t>(h) * head_dim + 2 * i + j;
        const int64_t rotate_half = static_cast<int64_t>(h) * head_dim + j * half + i;
        const int64_t src = from == RopeKind::kInterleaved ? interleaved : rotate_half;
        const int64_t dst = from == RopeKind::kInterleaved ? rotate_half : interleaved;
        std::memcpy(out.data() + dst * width, w.data() + src * width, sizeof(float) * width);
      }
    }
  }
  return out;
}

bool CanKeepStored(const TensorSpec& spec) {
  return spec.targets.size() == 1 && spec.fused_rows.empty() && !spec.transposed &&
         spec.offset == 0.0f && (spec.shape.size() == 2 || spec.shape.size() == 3) &&
         spec.mxfp4_scales.empty() && !spec.read;
}

const uint8_t* TensorSource::BytesU8(const std::string& name, std::shared_ptr<const void>*) const {
  Fail(
      "{}: tensor '{}' is not stored as U8 bytes (MXFP4 blocks and scales are U8 tensors of a "
      "safetensors checkpoint)",
      source(), name);
}

uint64_t BindBytes(const TensorMap& map, const TensorSource& source,
                   const std::function<std::optional<double>(const TensorSpec&,
                                                             const std::string&)>& packed_bytes) {
  uint64_t bytes = 0;
  for (const TensorSpec& spec : map.specs) {
    std::string name = spec.name;
    for (const std::string& alias : spec.aliases)
      if (!source.Has(name) && source.Has(alias)) name = alias;
    if (!source.Has(name)) continue;  // BindTensors names it, or it is optional
    uint64_t n = 1;
    for (int64_t d : source.Shape(name)) n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
    if (!spec.mxfp4_scales.empty()) n *= 2;  // two values a byte of blocks
    const std::optional<double> per_value =
        packed_bytes && !spec.targets.empty() ? packed_bytes(spec, name) : std::nullopt;
    bytes += per_value ? static_cast<uint64_t>(static_cast<double>(n) * *per_value)
             : source.LoadsAsView(name) && spec.offset == 0.0f && !spec.read ? 0
                                                                             : 4 * n;
  }
  return bytes;
}

namespace {

// Why a required tensor may be missing, when the file holds it in the other form: MXFP4 blocks
// where the family expects another type, or the reverse. Empty otherwise.
std::string MissingHint(const TensorSpec& spec, const TensorSource& source) {
  if (!spec.mxfp4_scales.empty()) {
    const std::string plain = spec.name.substr(0, spec.name.size() - std::string("_blocks").size());
    if (source.Has(plain))
      return fmt::format(
          "; the file stores '{}' instead, not MXFP4 blocks, but config.json's "
          "quantization_config says mxfp4",
          plain);
    return "";
  }
  std::string stem = spec.name;
  if (stem.ends_with(".weight")) stem.resize(stem.size() - std::string(".weight").size());
  for (const std::string& blocks : {spec.name + "_blocks", stem + "_blocks"})
    if (source.Has(blocks))
      return fmt::format(
          "; the file stores it as MXFP4 blocks ('{}'), which sinkscope reads only "
          "for gpt-oss's experts under a quantization_config with quant_method "
          "mxfp4",
          blocks);
  return "";
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Keeps two owners (blocks and scales may lie in different shards) alive as one.
std::shared_ptr<const void> BothOwners(std::shared_ptr<const void> a,
                                       std::shared_ptr<const void> b) {
  if (a == b) return a;
  return std::make_shared<std::pair<std::shared_ptr<const void>, std::shared_ptr<const void>>>(
      std::move(a), std::move(b));
}

// An MXFP4 spec (TensorSpec::mxfp4_scales): checks the pair, then keeps it as split-MXFP4 views
// (native) or decodes it into the targets.
void BindMxfp4(const TensorSpec& spec, const std::string& blocks, const TensorSource& source,
               const std::string& family,
               const std::function<void(Tensor*, uint32_t stored_type)>& bound,
               const KeepStoredFn& keep) {
  const std::string& scales = spec.mxfp4_scales;
  const std::string& src = source.source();
  if (!source.Has(scales))
    Fail("{}: missing tensor '{}' (the scales of '{}', required by the {} architecture)", src,
         scales, blocks, family);
  const int64_t in = spec.shape.back();
  if (in % kMxfp4Block != 0)
    Fail("{}: tensor '{}': rows of {} values are not a whole number of {}-value MXFP4 blocks", src,
         blocks, in, kMxfp4Block);
  std::vector<int64_t> want_scales(spec.shape.begin(), spec.shape.end() - 1);
  want_scales.push_back(in / kMxfp4Block);
  std::vector<int64_t> want_blocks = want_scales;
  want_blocks.push_back(kMxfp4NibbleBytes);
  // The type first (a U8 tensor each), then the shapes.
  std::shared_ptr<const void> blocks_owner, scales_owner;
  const uint8_t* nibbles = source.BytesU8(blocks, &blocks_owner);
  const uint8_t* scale = source.BytesU8(scales, &scales_owner);
  const std::vector<int64_t> found_blocks = source.Shape(blocks),
                             found_scales = source.Shape(scales);
  if (found_blocks.size() < 2 || found_blocks.back() != kMxfp4NibbleBytes)
    Fail(
        "{}: tensor '{}' has shape {}: MXFP4 blocks are {} bytes (32 values) each, so its last "
        "dimension must be {}",
        src, blocks, ShapeString(found_blocks), kMxfp4NibbleBytes, kMxfp4NibbleBytes);
  if (!std::equal(found_blocks.begin(), found_blocks.end() - 1, found_scales.begin(),
                  found_scales.end()))
    Fail("{}: tensors '{}' {} and '{}' {} disagree: MXFP4 has one scale per 16-byte block", src,
         blocks, ShapeString(found_blocks), scales, ShapeString(found_scales));
  if (found_blocks != want_blocks)
    Fail("{}: tensor '{}' has shape {}, expected {} (the MXFP4 blocks of a {} tensor)", src, blocks,
         ShapeString(found_blocks), ShapeString(want_blocks), ShapeString(spec.shape));
  const int64_t groups = Numel(want_scales);
  if (const int64_t b = Mxfp4FirstFault(scale, 1, nibbles, kMxfp4NibbleBytes, groups); b >= 0)
    Fail("{}: tensor '{}' (MXFP4): block {} (row {}, group {}; scale byte 0x{:02X} in '{}'): {}",
         src, blocks, b, b / want_scales.back(), b % want_scales.back(), scale[b], scales,
         Mxfp4BlockFault(scale[b], nibbles + b * kMxfp4NibbleBytes));
  std::vector<int64_t> target_shape = spec.shape;
  const size_t parts = spec.alternate_rows ? 2 : 1;
  SS_ASSERT(spec.targets.size() == parts && spec.fused_rows.empty() && !spec.transposed);
  if (spec.alternate_rows) {
    SS_ASSERT(target_shape.size() >= 2 && target_shape[target_shape.size() - 2] % 2 == 0);
    target_shape[target_shape.size() - 2] /= 2;
  }
  if (keep) {
    const std::shared_ptr<const void> owner = BothOwners(blocks_owner, scales_owner);
    const size_t row_nibbles = static_cast<size_t>(in) / 2,
                 row_scales = static_cast<size_t>(in) / kMxfp4Block;
    size_t kept = 0;
    for (size_t i = 0; i < parts; ++i) {
      StoredTensor stored{kTypeMxfp4Split,
                          nibbles + i * row_nibbles,
                          owner,
                          scale + i * row_scales,
                          static_cast<int>(parts),
                          source.Mapped(blocks) && source.Mapped(scales)};
      kept += keep(spec.targets[i], blocks, target_shape, stored);
    }
    SS_ASSERT(kept == 0 || kept == parts);  // the packer takes a whole spec or none of it
    if (kept == parts) return;
  }
  Tensor t = Tensor::Zeros(spec.shape);
  DequantizeMxfp4Split(nibbles, scale, t.data(), t.numel());
  if (spec.alternate_rows) {
    const int64_t rows = t.numel() / in;
    for (size_t i = 0; i < parts; ++i) {
      Tensor part = Tensor::Zeros(target_shape);
      for (int64_t r = 0; r < rows / 2; ++r)
        std::memcpy(part.data() + r * in, t.data() + (2 * r + i) * in, sizeof(float) * in);
      *spec.targets[i] = part;
    }
  } else {
    *spec.targets[0] = t;
  }
  t = Tensor();
  if (bound)
    for (Tensor* target : spec.targets) bound(target, kTypeMxfp4Split);
}

}  // namespace

void BindTensors(const TensorMap& map, const TensorSource& source, const std::string& family,
                 const std::function<void(Tensor*, uint32_t stored_type)>& bound,
                 const KeepStoredFn& keep) {
  for (const TensorSpec& spec : map.specs) {
    std::string name = spec.name;
    for (const std::string& alias : spec.aliases)
      if (!source.Has(name) && source.Has(alias)) name = alias;
    if (!source.Has(name)) {
      if (spec.optional) continue;
      Fail("{}: missing tensor '{}' (required by the {} architecture){}", source.source(),
           spec.name, family, MissingHint(spec, source));
    }
    if (!spec.mxfp4_scales.empty()) {
      BindMxfp4(spec, name, source, family, bound, keep);
      continue;
    }
    const std::vector<int64_t> expected = StoredShape(spec);
    const std::vector<int64_t> found = source.Shape(name);
    if (found != expected)
      Fail("{}: tensor '{}' has shape {}, expected {}", source.source(), name, ShapeString(found),
           ShapeString(expected));
    // The stored bytes and type, if not F32: offered to `keep`, else the type told to `bound`.
    StoredTensor stored;
    const bool typed = source.Stored(name, &stored);
    if (keep && CanKeepStored(spec) && typed && (stored.mapped = source.Mapped(name), true) &&
        keep(spec.targets[0], name, expected, stored))
      continue;
    const uint32_t stored_type = typed ? stored.ggml_type : kGgmlTypeF32;
    Tensor t = source.Load(name);
    // One pass over each tensor as it is loaded (memory-mapped or just converted, so in cache): a
    // NaN or Inf weight would otherwise surface only as NaN logits, far from its cause.
    if (const int64_t bad = FirstNonFinite(t.data(), t.numel()); bad >= 0)
      Fail("{}: tensor '{}' holds a non-finite value ({}) at element {}", source.source(), name,
           t.data()[bad], bad);
    if (spec.transposed) t = Transposed(t);
    if (spec.offset != 0.0f) {  // a copy: t may view the file
      Tensor shifted = Tensor::Zeros(t.shape());
      for (int64_t i = 0; i < t.numel(); ++i) shifted[i] = t[i] - spec.offset;
      t = shifted;
    }
    if (spec.read) t = spec.read(t, fmt::format("{}: tensor '{}'", source.source(), name));
    if (spec.fused_rows.empty()) {
      SS_ASSERT(spec.targets.size() == 1);
      *spec.targets[0] = t;
    } else {
      SplitFused(spec, t);
    }
    t = Tensor();  // the fused original, before the packs
    if (bound)
      for (Tensor* target : spec.targets) bound(target, stored_type);
  }
  for (const auto& step : map.after_bind) step();
}

namespace {

// Splits a tensor name at its first number between dots: "blk.12.ffn_up.weight" -> ("blk.",
// 12, ".ffn_up.weight"). Returns false if the name has none.
bool SplitLayerNumber(const std::string& name, std::string* head, long* layer, std::string* tail) {
  size_t i = 0;
  while (i < name.size()) {
    const size_t start = i;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
    const bool digits = i > start && i - start <= 6;
    const bool bounded =
        digits && (start == 0 || name[start - 1] == '.') && (i == name.size() || name[i] == '.');
    if (bounded) {
      *head = name.substr(0, start);
      *layer = std::stol(name.substr(start, i - start));
      *tail = name.substr(i);
      return true;
    }
    while (i < name.size() && name[i] != '.') ++i;
    if (i < name.size()) ++i;
  }
  return false;
}

}  // namespace

void CheckNoExtraLayers(const TensorMap& map, const TensorSource& source, int n_layers,
                        const std::string& layers_key) {
  std::set<std::string> bound;
  for (const TensorSpec& spec : map.specs) {
    bound.insert(spec.name);
    if (!spec.mxfp4_scales.empty()) bound.insert(spec.mxfp4_scales);
    for (const std::string& alias : spec.aliases) bound.insert(alias);
  }
  for (const std::string& name : source.Names()) {
    if (bound.count(name)) continue;
    std::string head, tail;
    long layer = 0;
    if (!SplitLayerNumber(name, &head, &layer, &tail) || layer < n_layers) continue;
    // Only a layer-shaped tensor counts: the same name with layer 0 is one the family binds.
    if (bound.count(head + "0" + tail))
      Fail(
          "{}: tensor '{}' belongs to layer {}, but the config declares {} layers ('{}'); the "
          "file stores more layers than the config says",
          source.source(), name, layer, n_layers, layers_key);
  }
}

std::vector<std::pair<std::string, Tensor>> ExportTensors(const TensorMap& map, RopeKind model_rope,
                                                          int head_dim, int rot_dim) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const TensorSpec& spec : map.specs) {
    bool all_empty = true, any_empty = false;
    for (const Tensor* t : spec.targets) {
      all_empty = all_empty && t->empty();
      any_empty = any_empty || t->empty();
    }
    if (all_empty && spec.optional) continue;
    if (any_empty) Fail("cannot write tensor '{}': the model has no weights for it", spec.name);
    if (!spec.mxfp4_scales.empty() || spec.alternate_rows)
      Fail("cannot write tensor '{}': MXFP4 blocks are read, not written", spec.name);
    Tensor t;
    if (spec.fused_rows.empty()) {
      t = *spec.targets[0];
      int64_t expected = 1;
      for (int64_t d : spec.shape) expected *= d;
      if (t.numel() != expected)
        Fail("cannot write tensor '{}': the model's tensor has shape {}, the file needs {}",
             spec.name, t.ShapeString(), ShapeString(spec.shape));
      if (t.shape() != spec.shape) t = t.Reshaped(spec.shape);
    } else {
      SS_ASSERT(spec.rope_heads == 0);
      t = JoinFused(spec);
    }
    if (spec.rope_heads > 0)
      t = PermuteRopeRows(t, spec.rope_heads, head_dim, rot_dim, model_rope, map.file_rope);
    if (spec.write) t = spec.write(t);
    if (spec.transposed) t = Transposed(t);
    if (spec.offset != 0.0f) {
      Tensor shifted = Tensor::Zeros(t.shape());
      for (int64_t i = 0; i < t.numel(); ++i) shifted[i] = t[i] + spec.offset;
      t = shifted;
    }
    out.emplace_back(spec.name, t);
  }
  return out;
}

}  // namespace ss
