// Tensor-name maps: how a family's weights are named and laid out in Hugging Face safetensors and
// in GGUF, and the two generic loops that use a map to fill ModelWeights from a file (Bind) and to
// list a model's tensors for a writer (Export). Each family builds its map in its own
// model/arch_<family>.cpp; this file knows nothing about any family.
//
// The model layer does not read files: readers in io/ hand Bind a TensorSource.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/weights.h"

namespace ss {

// Which file convention the names and layouts follow.
enum class TensorNaming { kHf, kGguf };

// A tensor's bytes as the file stores them, in a ggml type's row layout (kernels/dequant.h; a
// safetensors F16 / BF16 tensor is the same bytes) or as the split MXFP4 (kTypeMxfp4Split: the
// nibbles at `data`, the scales at `scales`), for a loader that keeps weights in their own type
// (--precision native). `owner` keeps both alive. The member's rows are every `row_step`-th
// stored row, the first at `data` (and `scales`).
struct StoredTensor {
  uint32_t ggml_type = 0;
  const uint8_t* data = nullptr;
  std::shared_ptr<const void> owner;
  const uint8_t* scales = nullptr;
  int row_step = 1;
  bool mapped = false;  // the bytes are pages of a read-only file mapping (TensorSource::Mapped)
};

// A source of named float32 tensors (a safetensors checkpoint, a GGUF file). Shapes are in
// PyTorch order: (out, in) for a linear weight.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual bool Has(const std::string& name) const = 0;
  virtual std::vector<int64_t> Shape(const std::string& name) const = 0;
  // The tensor as float32 (converted or dequantised as the file requires).
  virtual Tensor Load(const std::string& name) const = 0;
  virtual const std::string& source() const = 0;       // file or directory, for error messages
  virtual size_t count() const = 0;                    // tensors in the source
  virtual std::vector<std::string> Names() const = 0;  // every tensor in the source
  // Whether Load returns a view of the file's mapping (no allocation): a stored F32 tensor.
  virtual bool LoadsAsView(const std::string& name) const {
    (void)name;
    return false;
  }
  // Whether the tensor's bytes are pages of a read-only file mapping, which ReleaseMappedPages
  // (common/file_util.h) may drop once they are copied out.
  virtual bool Mapped(const std::string& name) const {
    (void)name;
    return false;
  }
  // The stored bytes of a tensor held in a 2-byte or block type (not F32), if the source can give
  // them: false otherwise.
  virtual bool Stored(const std::string& name, StoredTensor* out) const {
    (void)name, (void)out;
    return false;
  }
  // The bytes of a tensor stored as U8 (MXFP4 blocks and scales) and what keeps them alive. Throws
  // ss::Error naming the source, the tensor and its type when it is not U8.
  virtual const uint8_t* BytesU8(const std::string& name, std::shared_ptr<const void>* owner) const;
};

struct TensorSpec {
  std::string name;                  // in the file
  std::vector<std::string> aliases;  // other names a reader accepts (e.g. without a prefix)
  std::vector<Tensor*> targets;      // one member, or several (q, k, v) for a fused tensor
  std::vector<int64_t> shape;        // the stored shape as PyTorch orders it, after `transposed` is
                                     // undone: (out, in) for linear weights
  bool transposed = false;           // stored as (in, out) (GPT-2 Conv1D)
  // Fused tensors (several targets): the stored rows are `fused_groups` groups, each holding
  // fused_rows[i] rows of target i in turn. [q | k | v] (GPT-2 c_attn, llama.cpp attn_qkv) is one
  // group of {H*Dh, Hkv*Dh, Hkv*Dh}; GPT-NeoX's query_key_value, [h][q | k | v][Dh], is H groups
  // of {Dh, Dh, Dh}. A 1-D bias is split the same way with rows of one value.
  int fused_groups = 1;
  std::vector<int64_t> fused_rows;
  bool optional = false;  // absent in the file: the member stays empty
  // > 0: the rows are q or k rows of this many heads in RoPE pair order; a writer permutes them
  // when the model's RoPE order differs from the file's (TensorMap::file_rope).
  int rope_heads = 0;
  // The file stores value + offset (llama.cpp's Gemma norms hold 1 + w): subtracted when read,
  // added when written.
  float offset = 0.0f;
  // MXFP4 as the gpt-oss safetensors store it (kernels/dequant.h, kTypeMxfp4Split): `name` is the
  // `<x>_blocks` tensor (..., G, 16), this names its `<x>_scales` (..., G), and `shape` is the
  // decoded tensor's, (..., 32 G), in (out, in) order. Read only (writers never produce it).
  std::string mxfp4_scales;
  // Two targets whose rows alternate in the stored tensor: row 2i is target 0's row i, row 2i + 1
  // target 1's (gpt-oss's gate_up_proj blocks: gate at even rows, up at odd ones). Each target's
  // shape is `shape` with its second-to-last dimension halved.
  bool alternate_rows = false;
  // A layout change the fields above cannot express (llama.cpp's Qwen3.5 value-head order, its
  // ssm_a = -exp(A_log)). `read` turns the stored tensor (PyTorch order, after `offset`, before
  // the split into targets) into the model's; it may refuse a value with ss::Fail, its message
  // starting with `where` ("<file>: tensor '<name>'"). `write` turns the joined model tensor into
  // the stored one (before `offset` is added). Both return a new tensor. A spec with a transform
  // is never kept in its stored bytes.
  std::function<Tensor(const Tensor&, const std::string& where)> read;
  std::function<Tensor(const Tensor&)> write;
};

// A plain spec: one stored tensor, one member, no layout change.
TensorSpec Spec(std::string name, std::vector<Tensor*> targets, std::vector<int64_t> shape);

struct TensorMap {
  std::vector<TensorSpec> specs;
  // The RoPE pair order the file convention stores q/k rows for (HF: kHalf; GGUF llama:
  // kInterleaved, Meta's original order). kNone: never permute.
  RopeKind file_rope = RopeKind::kNone;
  // Per-expert tensors: views into stacked members (writing) or loaded slices that after_bind
  // stacks (reading). A deque: growing it keeps the pointers in specs valid.
  std::deque<Tensor> slices;
  // Run by BindTensors once every tensor is loaded (e.g. stacking experts), so that nothing is
  // allocated from the config alone before the file has shown it holds that much data.
  std::vector<std::function<void()>> after_bind;
};

// Whether a spec's stored rows are its member's rows as they are (one 2-D member, or a 3-D stack
// of experts; not fused, not transposed, no offset), so that the member can be kept in the stored
// bytes. (MXFP4 specs are offered to `keep` on their own terms: BindTensors.)
bool CanKeepStored(const TensorSpec& spec);

// Takes a member (a spec for which CanKeepStored holds) in its stored bytes: returns true if it
// kept them (the member is then not loaded as f32), false to load it as usual.
using KeepStoredFn =
    std::function<bool(Tensor* member, const std::string& name, const std::vector<int64_t>& shape,
                       const StoredTensor& stored)>;

// Fills `weights` (layers already sized to config.n_layers) from `source` with `map`. Throws
// ss::Error naming the source and tensor for a missing tensor ("missing tensor 'x'") and a shape
// mismatch ("tensor 'x' has shape [..], expected [..]"); for an MXFP4 spec also for blocks and
// scales whose shapes disagree, a type other than U8, and a block whose scale is NaN or whose
// values overflow f32. A required tensor that is missing but stored as MXFP4 blocks
// (`<name>_blocks`) is named as such. `bound`, if set, is called on each member as soon as it is
// filled (WeightPacker packs projections there, one tensor at a time), with the ggml type the
// source stores the tensor in (kGgmlTypeF32 for F32); `keep`, if set, is offered
// each member the source stores in a non-F32 type first (an MXFP4 spec's members as
// kTypeMxfp4Split views).
void BindTensors(const TensorMap& map, const TensorSource& source, const std::string& family,
                 const std::function<void(Tensor*, uint32_t stored_type)>& bound = nullptr,
                 const KeepStoredFn& keep = nullptr);

// The memory BindTensors will allocate for `map`'s tensors: 4 bytes a value for each tensor that
// does not load as a view of the file, and for a member that will be packed or kept stored the
// bytes a value `packed_bytes(spec, stored name)` gives (2 for bf16, 1.125 for Q8_0, 0 for a
// member kept as a view of the file; nullopt for members that are neither).
uint64_t BindBytes(const TensorMap& map, const TensorSource& source,
                   const std::function<std::optional<double>(const TensorSpec&,
                                                             const std::string&)>& packed_bytes);

// The stored tensors no spec of `map` binds that belong to a layer the config does not declare:
// a name whose first number (".12." in "model.layers.12.mlp.up_proj.weight",
// "blk.12.ffn_up.weight") is >= n_layers and that names a bound tensor with a lower layer number.
// Throws ss::Error naming the source, the tensor and `layers_key` (the config's layer count key): a
// config that declares fewer layers than the file stores would otherwise drop the extra layers
// without a word.
void CheckNoExtraLayers(const TensorMap& map, const TensorSource& source, int n_layers,
                        const std::string& layers_key);

// The tensors to write for `map` (whose targets point into a model's weights), in map order, as
// PyTorch-ordered float32 tensors with the file's layout applied (transposed, fused, RoPE rows
// permuted from `model_rope` to map.file_rope). Empty optional members are skipped; an empty
// required one is an ss::Error naming the tensor.
std::vector<std::pair<std::string, Tensor>> ExportTensors(const TensorMap& map, RopeKind model_rope,
                                                          int head_dim, int rot_dim);

// Reorders the rows of q or k weights (or biases) of `n_heads` heads of `head_dim` rows from one
// RoPE pair order to the other, on the first `rot_dim` rows of each head. Interleaved -> half is
// the permutation of Hugging Face's convert_llama_weights_to_hf.py: row 2i + j of a head moves to
// row j * rot_dim / 2 + i. Returns a new tensor.
Tensor PermuteRopeRows(const Tensor& w, int n_heads, int head_dim, int rot_dim, RopeKind from,
                       RopeKind to);

// (a, b) -> (b, a) copy of a 2-D tensor.
Tensor Transposed(const Tensor& w);

}  // namespace ss
