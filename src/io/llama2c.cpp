#include "io/llama2c.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstring>

#include "common/error.h"
#include "common/file_util.h"

namespace ss {

namespace {

constexpr uint32_t kMagicAk42 = 0x616b3432;  // "ak42" little-endian
constexpr size_t kVersion1HeaderBytes = 256;

struct Header {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

void CheckHeader(const std::string& path, const Header& h) {
  auto positive = [&](const char* name, int64_t v, int64_t max) {
    if (v <= 0 || v > max)
      Fail("{}: header field {} = {} is out of range (expected 1..{}); not a llama2.c model?", path,
           name, v, max);
  };
  positive("dim", h.dim, 1 << 16);
  positive("hidden_dim", h.hidden_dim, 1 << 18);
  positive("n_layers", h.n_layers, 1024);
  positive("n_heads", h.n_heads, 1024);
  positive("n_kv_heads", h.n_kv_heads, 1024);
  positive("seq_len", h.seq_len, 1 << 24);
  if (h.vocab_size == 0 || h.vocab_size > (1 << 22) || h.vocab_size < -(1 << 22))
    Fail("{}: header field vocab_size = {} is out of range; not a llama2.c model?", path,
         h.vocab_size);
  if (h.dim % h.n_heads != 0)
    Fail("{}: dim {} is not divisible by n_heads {}", path, h.dim, h.n_heads);
  if (h.n_heads % h.n_kv_heads != 0)
    Fail("{}: n_heads {} is not divisible by n_kv_heads {}", path, h.n_heads, h.n_kv_heads);
}

ModelConfig ConfigFromHeader(const Header& h) {
  ModelConfig c;
  c.arch = "llama";
  c.dim = h.dim;
  c.hidden_dim = h.hidden_dim;
  c.n_layers = h.n_layers;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.vocab_size = h.vocab_size < 0 ? -h.vocab_size : h.vocab_size;
  c.max_seq_len = h.seq_len;
  c.norm_eps = 1e-5f;  // run.c's rmsnorm
  c.norm = NormKind::kRms;
  c.act = ActKind::kSilu;
  c.gated_mlp = true;
  c.rope = RopeKind::kInterleaved;
  c.rope_theta = 10000.0f;
  c.tied_embeddings = h.vocab_size > 0;
  c.bos_id = 1;
  c.eos_id = 2;
  return c;
}

// Hands out consecutive float arrays of the mapped file as tensor views, and checks each for NaN
// and Inf as it does (one pass over the mapped weights at load).
class Cursor {
 public:
  Cursor(std::shared_ptr<MappedFile> file, size_t offset)
      : file_(std::move(file)), offset_(offset) {}
  Tensor Take(const char* name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    SS_ASSERT(offset_ + n * sizeof(float) <= file_->size);  // sizes were validated up front
    float* p = reinterpret_cast<float*>(const_cast<uint8_t*>(file_->data + offset_));
    if (const int64_t bad = FirstNonFinite(p, n); bad >= 0) {
      const int64_t per_layer = shape.size() > 1 ? n / shape[0] : n;
      Fail("{}: weight '{}' holds a non-finite value ({}) {} (byte offset {})", file_->path, name,
           p[bad],
           shape.size() > 2
               ? fmt::format("in layer {} at element {}", bad / per_layer, bad % per_layer)
               : fmt::format("at element {}", bad),
           offset_ + bad * sizeof(float));
    }
    offset_ += n * sizeof(float);
    return Tensor::View(p, std::move(shape), file_);
  }
  // Per-layer views of an (L, rows, cols) array.
  void TakeLayers(const char* name, std::vector<LayerWeights>& layers, Tensor LayerWeights::*member,
                  std::vector<int64_t> per_layer) {
    std::vector<int64_t> shape = {static_cast<int64_t>(layers.size())};
    shape.insert(shape.end(), per_layer.begin(), per_layer.end());
    if (shape.size() == 2) shape.push_back(1);  // (L, D, 1): the layer shows in the error
    Tensor all = Take(name, shape);
    for (size_t l = 0; l < layers.size(); ++l)
      layers[l].*member = all.Rows(l, 1).Reshaped(per_layer);
  }
  void Skip(int64_t floats) { offset_ += floats * sizeof(float); }

 private:
  std::shared_ptr<MappedFile> file_;
  size_t offset_;
};

}  // namespace

bool LooksLikeLlama2c(const std::string& path) {
  int fd = -1;
  try {
    fd = OpenRegularFile(path);  // never blocks on a FIFO
  } catch (const Error&) {
    return false;
  }
  int32_t h[7] = {};
  const ssize_t n = read(fd, h, sizeof(h));
  close(fd);
  if (n != static_cast<ssize_t>(sizeof(h))) return false;
  if (static_cast<uint32_t>(h[0]) == kMagicAk42) return true;
  return h[0] > 0 && h[0] <= (1 << 16) && h[1] > 0 && h[2] > 0 && h[2] <= 1024 && h[3] > 0 &&
         h[4] > 0 && h[5] != 0 && h[6] > 0;
}

Model LoadLlama2c(const std::string& path) {
  auto file = MapFile(path);
  if (file->size < sizeof(Header))
    Fail("{}: file is {} bytes, too short for a llama2.c header (28 bytes)", path, file->size);
  uint32_t magic;
  std::memcpy(&magic, file->data, 4);
  Header h{};
  size_t data_offset;
  bool v1 = false;
  bool shared_classifier;
  if (magic == kMagicAk42) {
    if (file->size < kVersion1HeaderBytes)
      Fail("{}: file is {} bytes, too short for a llama2.c version header (256 bytes)", path,
           file->size);
    int32_t version;
    std::memcpy(&version, file->data + 4, 4);
    if (version == 2)
      Fail(
          "{}: llama2.c version 2 (Q8_0 quantised export) is not supported; export with "
          "version 0 (legacy) or 1 (float32)",
          path);
    if (version != 1)
      Fail("{}: unknown llama2.c version {} (supported: legacy and version 1)", path, version);
    std::memcpy(&h, file->data + 8, sizeof(Header));
    shared_classifier = file->data[8 + sizeof(Header)] != 0;
    data_offset = kVersion1HeaderBytes;
    v1 = true;
    if (h.vocab_size <= 0)
      Fail("{}: vocab_size {} must be positive in version 1", path, h.vocab_size);
  } else {
    std::memcpy(&h, file->data, sizeof(Header));
    shared_classifier = h.vocab_size > 0;
    data_offset = sizeof(Header);
  }
  CheckHeader(path, h);
  if (v1) h.vocab_size = shared_classifier ? h.vocab_size : -h.vocab_size;
  Model model;
  model.config = ConfigFromHeader(h);
  ValidateConfig(model.config, path,
                 {{"dim", "header dim"},
                  {"hidden_dim", "header hidden_dim"},
                  {"n_layers", "header n_layers"},
                  {"n_heads", "header n_heads"},
                  {"n_kv_heads", "header n_kv_heads"},
                  {"vocab_size", "header vocab_size"},
                  {"max_seq_len", "header seq_len"}});
  model.source = path;
  model.format = v1 ? "llama2c-v1" : "llama2c";
  const ModelConfig& c = model.config;

  const int64_t D = c.dim, F = c.hidden_dim, L = c.n_layers, V = c.vocab_size, KV = c.kv_dim();
  const int64_t Dh = c.head_dim;
  int64_t floats = V * D + 2 * L * D + L * D * D * 2 + 2 * L * KV * D + 3 * L * D * F + D;
  if (!v1) floats += c.max_seq_len * Dh;  // freq_cis_real + freq_cis_imag, (seq_len, Dh/2) each
  if (!shared_classifier) floats += V * D;
  const uint64_t expected = data_offset + static_cast<uint64_t>(floats) * sizeof(float);
  if (file->size != expected)
    Fail(
        "{}: file is {} bytes but its header (dim {}, hidden {}, layers {}, heads {}/{}, vocab {}, "
        "seq_len {}) implies {} bytes{}",
        path, file->size, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size,
        c.max_seq_len, expected, file->size < expected ? " (truncated?)" : "");

  ModelWeights& w = model.weights;
  w.layers.resize(L);
  Cursor cur(file, data_offset);
  if (v1) {
    cur.TakeLayers("rms_att_weight", w.layers, &LayerWeights::attn_norm, {D});
    cur.TakeLayers("rms_ffn_weight", w.layers, &LayerWeights::ffn_norm, {D});
    w.final_norm = cur.Take("rms_final_weight", {D});
    w.token_embedding = cur.Take("token_embedding_table", {V, D});
  } else {
    w.token_embedding = cur.Take("token_embedding_table", {V, D});
    cur.TakeLayers("rms_att_weight", w.layers, &LayerWeights::attn_norm, {D});
  }
  cur.TakeLayers("wq", w.layers, &LayerWeights::wq, {D, D});
  cur.TakeLayers("wk", w.layers, &LayerWeights::wk, {KV, D});
  cur.TakeLayers("wv", w.layers, &LayerWeights::wv, {KV, D});
  cur.TakeLayers("wo", w.layers, &LayerWeights::wo, {D, D});
  if (!v1) cur.TakeLayers("rms_ffn_weight", w.layers, &LayerWeights::ffn_norm, {D});
  cur.TakeLayers("w1", w.layers, &LayerWeights::w1, {F, D});
  cur.TakeLayers("w2", w.layers, &LayerWeights::w2, {D, F});
  cur.TakeLayers("w3", w.layers, &LayerWeights::w3, {F, D});
  if (!v1) {
    w.final_norm = cur.Take("rms_final_weight", {D});
    cur.Skip(c.max_seq_len * Dh);  // freq_cis: RoPE is recomputed
  }
  w.lm_head = shared_classifier ? w.token_embedding : cur.Take("wcls", {V, D});
  return model;
}

}  // namespace ss
