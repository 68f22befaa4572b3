// sinkscope inspect --model PATH: architecture, dimensions, parameter count.
#include <fmt/format.h>

#include "cli/commands.h"
#include "io/load.h"

namespace ss::cli {

static const char* RopeName(RopeKind k) {
  switch (k) {
    case RopeKind::kNone: return "none";
    case RopeKind::kInterleaved: return "interleaved pairs (2i, 2i+1)";
    case RopeKind::kHalf: return "rotate-half pairs (i, i+d/2)";
  }
  return "?";
}

void RegisterInspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show a model's architecture, dimensions and size");
  auto model_path = std::make_shared<std::string>();
  cmd->add_option("--model", *model_path, "Model file or directory")->required();
  cmd->callback([model_path] {
    Model model = LoadModel(*model_path);
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
    fmt::print("embeddings    {}\n", c.tied_embeddings ? "tied (classifier = embedding)" : "untied");
    fmt::print("parameters    {} ({:.2f} M)\n", params, params / 1e6);
  });
}

}  // namespace ss::cli
