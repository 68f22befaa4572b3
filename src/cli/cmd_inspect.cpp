// sinkscope inspect --model PATH: architecture, dimensions, parameter count, the stored tensor
// types. The model is loaded at native precision, so that quantised weights (an MXFP4 gpt-oss
// checkpoint's experts) stay views of the file rather than being expanded to f32.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "io/load.h"
#include "model/attention.h"

namespace ss::cli {

static const char* RopeName(RopeKind k) {
  switch (k) {
    case RopeKind::kNone:
      return "none";
    case RopeKind::kInterleaved:
      return "interleaved pairs (2i, 2i+1)";
    case RopeKind::kHalf:
      return "rotate-half pairs (i, i+d/2)";
  }
  return "?";
}

void RegisterInspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show a model's architecture, dimensions and size");
  auto model_path = std::make_shared<std::string>();
  AddModelOptions(cmd, model_path.get(), /*tokenizer=*/nullptr, /*precision=*/nullptr);
  cmd->callback([model_path] {
    Model model = LoadModel(*model_path, Precision::kNative);
    const ModelConfig& c = model.config;
    const int64_t params = model.ParameterCount();
    fmt::print("model         {}\n", model.source);
    fmt::print("format        {}\n", model.format);
    fmt::print("architecture  {}\n", c.arch);
    fmt::print("layers        {}\n", c.n_layers);
    fmt::print("width         {} (head size {}, {} query heads, {} key/value heads)\n", c.dim,
               c.head_dim, c.n_heads, c.n_kv_heads);
    fmt::print("mlp hidden    {} ({})\n", c.hidden_dim, c.gated_mlp ? "gated" : "plain");
    fmt::print("vocabulary    {}\n", c.vocab_size);
    fmt::print("context       {}\n", c.max_seq_len);
    fmt::print("norm          {} eps {}\n", c.norm == NormKind::kRms ? "RMSNorm" : "LayerNorm",
               c.norm_eps);
    fmt::print("rope          {} theta {}\n", RopeName(c.rope), c.rope_theta);
    std::vector<std::string> features;
    if (c.qkv_bias) features.push_back("q/k/v biases");
    if (c.qk_norm == QkNormKind::kPerHead) features.push_back("per-head q/k norm");
    if (c.qk_norm == QkNormKind::kFull) features.push_back("q/k norm over the projection");
    if (c.post_norms) features.push_back("norms after attention and MLP");
    if (c.parallel_residual) features.push_back("parallel residual");
    if (c.learned_pos) features.push_back("learned positions");
    if (c.sliding_window > 0) {
      int sliding = 0;
      for (int l = 0; l < c.n_layers; ++l) sliding += c.Window(l) > 0;
      features.push_back(sliding == c.n_layers
                             ? fmt::format("sliding window {}", c.sliding_window)
                             : fmt::format("sliding window {} on {} of {} layers", c.sliding_window,
                                           sliding, c.n_layers));
    }
    if (const AttnVariant& v = ModelAttention(c); v.feature) features.push_back(v.feature);
    if (!c.dense_layers.empty()) {
      std::vector<int> dense;
      for (int l = 0; l < c.n_layers; ++l)
        if (!c.MoeLayer(l)) dense.push_back(l);
      features.push_back(fmt::format("dense MLP ({}) in layers {} instead of experts",
                                     c.dense_hidden_dim, fmt::join(dense, " ")));
    }
    if (c.rope_scaling == RopeScalingKind::kYarn)
      features.push_back(fmt::format("YaRN RoPE scaling x{} (original {})", c.rope_scaling_factor,
                                     c.rope_original_max_seq_len));
    if (c.swiglu_limit > 0)
      features.push_back(fmt::format("clamped expert GLU (limit {})", c.swiglu_limit));
    if (c.mxfp4_experts) features.push_back("experts stored as MXFP4 (quantization_config)");
    if (c.rotary_dim > 0)
      features.push_back(fmt::format("rotary dims {} of {}", c.rotary_dim, c.head_dim));
    if (c.rope_scaling == RopeScalingKind::kLinear)
      features.push_back(fmt::format("linear RoPE scaling x{}", c.rope_scaling_factor));
    if (c.rope_scaling == RopeScalingKind::kLlama3)
      features.push_back(fmt::format("Llama 3 RoPE scaling x{}", c.rope_scaling_factor));
    if (!model.weights.rope_freq_factors.empty()) features.push_back("RoPE frequency factors");
    if (c.final_logit_softcap != 0)
      features.push_back(fmt::format("logit soft-cap {}", c.final_logit_softcap));
    if (c.attn_logit_softcap != 0)
      features.push_back(fmt::format("attention soft-cap {}", c.attn_logit_softcap));
    if (c.norm_weight_offset != 0) features.push_back("RMSNorm x (1 + w)");
    if (c.embed_scale > 0) features.push_back(fmt::format("embeddings x {:.4g}", c.embed_scale));
    if (c.query_pre_attn_scalar > 0)
      features.push_back(fmt::format("scores / sqrt({})", c.query_pre_attn_scalar));
    if (c.rope_local_theta > 0)
      features.push_back(fmt::format("sliding layers' RoPE base {}", c.rope_local_theta));
    if (!features.empty()) fmt::print("features      {}\n", fmt::join(features, ", "));
    fmt::print("embeddings    {}\n",
               c.tied_embeddings ? "tied (classifier = embedding)" : "untied");
    fmt::print("parameters    {} ({:.2f} M)\n", params, params / 1e6);
    std::vector<std::string> types;
    for (const auto& [type, count] : StoredTensorTypes(*model_path))
      types.push_back(fmt::format("{} {}", type, count));
    if (!types.empty()) fmt::print("tensors       {}\n", fmt::join(types, ", "));
  });
}

}  // namespace ss::cli
