// sinkscope ppl: teacher-forced perplexity of a text under the model, in one forward pass.
#include <fmt/format.h>

#include <cmath>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/options.h"
#include "common/file_util.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/precision.h"
#include "report/report.h"

namespace ss::cli {

void RegisterPpl(CLI::App& app) {
  auto* cmd = app.add_subcommand("ppl", "Teacher-forced perplexity of a text");
  struct Args {
    ModelOptions model;
    std::string prompt, text;
    OutputOptions output;
    bool no_bos = false;
  };
  auto a = std::make_shared<Args>();
  a->model.Add(cmd, /*with_precision=*/true);
  InputFlags input;
  input.prompt = &a->prompt;
  input.prompt_note = "the text to score (or --text)";
  input.text = &a->text;
  input.text_note = "the text to score (or --prompt)";
  input.no_bos = &a->no_bos;
  const InputOptions in = AddInputOptions(cmd, input);
  a->output.Add(cmd, /*html=*/false,
                "the tokens, per-token NLL, mean NLL, perplexity and the precision");
  cmd->callback([a, prompt_opt = in.prompt, text_opt = in.text] {
    CheckOutputs({{"--json", a->output.json}},
                 SampleInputs(a->model.model_path, a->text, "", a->model.tokenizer_path));
    std::string text =
        ReadInputText(a->prompt, a->text, prompt_opt->count() > 0, text_opt->count() > 0);
    LoadedModel m = a->model.Load();
    const ModelConfig& c = m.model.config;
    std::vector<int> tokens = m.tokenizer->Encode(text, !a->no_bos);
    const int T = static_cast<int>(tokens.size());
    if (T < 2) Fail("the text gives {} token(s); perplexity needs at least 2", T);
    if (T > c.max_seq_len)
      Fail(
          "the text gives {} tokens, more than the model's context of {}; use `sinkscope stream` "
          "for long texts",
          T, c.max_seq_len);
    KVCache cache = KVCache::Create(c, T);
    RunState state;
    ForwardRequest req;
    req.tokens = tokens;
    Tensor logits = Forward(m.model, cache, state, req);
    std::vector<double> nll(T - 1);
    double sum = 0;
    for (int t = 0; t + 1 < T; ++t) {
      nll[t] = TokenNll(logits.row(t), c.vocab_size, tokens[t + 1]);
      sum += nll[t];
    }
    const double mean = sum / (T - 1);
    fmt::print("tokens      {}\nmean NLL    {:.6f}\nperplexity  {:.4f}\n", T, mean, std::exp(mean));
    if (!a->output.json.empty()) {
      nlohmann::json doc = {{"schema", "sinkscope.ppl/1"},
                            {"model", m.model.source},
                            {"precision", PrecisionName(m.model.precision)},
                            {"activations", ActivationsName(m.model)},
                            {"tokens", tokens},
                            {"nll", nll},
                            {"mean_nll", mean},
                            {"perplexity", std::exp(mean)}};
      report::WriteJson(a->output.json, doc);
    }
  });
}

}  // namespace ss::cli
