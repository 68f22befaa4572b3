#include "serve/serve.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <nlohmann/json.hpp>

#include "analysis/analyze_report.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/verbs.h"
#include "common/error.h"
#include "common/file_util.h"
#include "explain/explain_report.h"
#include "io/load.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "tokenizer/find.h"
#include "tokenizer/tokenizer.h"

namespace ss::serve {

std::string_view ViewerHtml();  // viewer.html, compiled in (viewer.cpp.in)

// ---------------------------------------------------------------- pattern tiles

namespace {

// Rows of queries per call of the attention kernel: the (rows, T) probabilities it writes.
constexpr int kQueryBlock = 128;

// Runs `fn(first_query, rows, probs)` over query blocks of [q0, q1), probs (rows, q0 + rows) with
// row r holding the probabilities of query q0 + r over keys 0 .. (zero beyond the query).
template <typename Fn>
void ForEachQueryBlock(const Model& model, int layer, const float* q, const float* k, int T,
                       int head, int q0, int q1, const float* slot_logits, Fn fn) {
  const ModelConfig& c = model.config;
  const int Dh = c.head_dim, H = c.n_heads, Hkv = c.n_kv_heads;
  const Tensor& sinks = model.weights.layers[layer].attn_sinks;
  AttnOptions opt{c.Window(layer), c.attn_sinks ? sinks.data() + head : nullptr, c.attn_logit_softcap};
  opt.sigmoid = c.attn_sigmoid;  // the tiles show sigmoid attention's weights as they are
  if (c.attn_kv_bias && !slot_logits)
    Fail("layer {}: a kv-bias model's pattern needs the slot logits of the forward pass", layer);
  const float query_scale = c.QueryScale(layer);  // hook_q is taken before it
  const int kv_head = head / (H / Hkv);
  std::vector<float> kh(static_cast<size_t>(q1) * Dh), vh(static_cast<size_t>(q1) * Dh, 0.0f);
  for (int j = 0; j < q1; ++j)
    std::copy_n(k + (static_cast<size_t>(j) * Hkv + kv_head) * Dh, Dh, kh.data() + static_cast<size_t>(j) * Dh);
  std::vector<float> qh, out, probs;
  for (int b = q0; b < q1; b += kQueryBlock) {
    const int rows = std::min(kQueryBlock, q1 - b), S = b + rows;
    qh.resize(static_cast<size_t>(rows) * Dh);
    for (int r = 0; r < rows; ++r)
      for (int d = 0; d < Dh; ++d)
        qh[static_cast<size_t>(r) * Dh + d] = q[(static_cast<size_t>(b + r) * H + head) * Dh + d] * query_scale;
    out.resize(static_cast<size_t>(rows) * Dh);
    probs.assign(static_cast<size_t>(rows) * S, 0.0f);
    // The slot's logits of this head's queries b .. b + rows: (1, rows) for the one-head call.
    if (c.attn_kv_bias) opt.slot_logits = slot_logits + static_cast<int64_t>(head) * T + b;
    // One head against its kv head: the same kernel, scaling and window as the forward pass.
    Attention(qh.data(), kh.data(), vh.data(), out.data(), rows, S, 1, 1, Dh, opt, probs.data(),
              nullptr);
    fn(b, rows, S, probs.data());
  }
}

}  // namespace

PatternTile ComputePatternTile(const Model& model, int layer, const float* q, const float* k, int T,
                               int head, int q0, int q1, int k0, int k1, int bins,
                               const float* slot_logits) {
  const ModelConfig& c = model.config;
  if (head < 0 || head >= c.n_heads) Fail("head {} is outside the model ({} heads)", head, c.n_heads);
  if (!(0 <= q0 && q0 < q1 && q1 <= T && 0 <= k0 && k0 < k1 && k1 <= T))
    Fail("window [{}, {}) x [{}, {}) is outside the {} tokens", q0, q1, k0, k1, T);
  if (bins < 1) Fail("bins: expected 1 or more, got {}", bins);
  PatternTile t;
  t.q0 = q0, t.q1 = q1, t.k0 = k0, t.k1 = k1;
  t.row_step = (q1 - q0 + bins - 1) / bins;
  t.col_step = (k1 - k0 + bins - 1) / bins;
  t.rows = (q1 - q0 + t.row_step - 1) / t.row_step;
  t.cols = (k1 - k0 + t.col_step - 1) / t.col_step;
  t.values.assign(static_cast<size_t>(t.rows) * t.cols, 0.0f);
  // Keys beyond the last query are masked for every query in the window: only keys < q1 matter.
  ForEachQueryBlock(model, layer, q, k, T, head, q0, q1, slot_logits, [&](int first, int rows, int S, const float* p) {
    for (int r = 0; r < rows; ++r) {
      const float* row = p + static_cast<size_t>(r) * S;
      float* cell_row = t.values.data() + static_cast<size_t>((first + r - q0) / t.row_step) * t.cols;
      for (int j = k0; j < std::min(k1, S); ++j) {
        float& cell = cell_row[(j - k0) / t.col_step];
        cell = std::max(cell, row[j]);
      }
    }
  });
  return t;
}

std::vector<float> ComputePatternRow(const Model& model, int layer, const float* q, const float* k, int T,
                                     int head, int query, const float* slot_logits) {
  const ModelConfig& c = model.config;
  if (head < 0 || head >= c.n_heads) Fail("head {} is outside the model ({} heads)", head, c.n_heads);
  if (query < 0 || query >= T) Fail("query {} is outside the {} tokens", query, T);
  std::vector<float> out(T, 0.0f);
  ForEachQueryBlock(model, layer, q, k, T, head, query, query + 1, slot_logits,
                    [&](int, int, int S, const float* p) { std::copy_n(p, S, out.data()); });
  return out;
}

// ---------------------------------------------------------------- the server

namespace {

using json = nlohmann::json;

constexpr size_t kMaxBodyBytes = size_t{8} << 20;  // a request's body: the text and settings
constexpr int kMaxBins = 1024;
constexpr int kMaxRuns = 8;            // analyses kept for the pattern view (oldest dropped)
constexpr int kMaxSamples = 1024;
constexpr int64_t kMaxStreamTokens = 200000;

// Replies carry token strings, which may hold partial UTF-8 sequences (byte pieces): replaced.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

struct HttpError : Error {
  int status;
  HttpError(int s, const std::string& m) : Error(m), status(s) {}
};

int IntField(const json& body, const char* key, int fallback, int lo, int hi) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  const json& v = body[key];
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    Fail("{}: expected an integer in [{}, {}], got {}", key, lo, hi, v.dump().substr(0, 40));
  return static_cast<int>(v.get<int64_t>());
}

double RealField(const json& body, const char* key, double fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  if (!body[key].is_number()) Fail("{}: expected a number", key);
  return body[key].get<double>();
}

int QueryInt(const httplib::Request& req, const char* key, int fallback, int lo, int hi) {
  if (!req.has_param(key)) {
    if (fallback < lo) Fail("missing parameter '{}'", key);
    return fallback;
  }
  const std::string s = req.get_param_value(key);
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < lo || v > hi)
    Fail("{}: expected an integer in [{}, {}], got '{}'", key, lo, hi, s.substr(0, 40));
  return static_cast<int>(v);
}

std::string JoinList(const json& v, const char* key) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) Fail("{}: expected a list of names", key);
  std::string out;
  for (const json& e : v) {
    if (!e.is_string()) Fail("{}: expected a list of names", key);
    out += (out.empty() ? "" : ",") + e.get<std::string>();
  }
  return out;
}

struct Run {
  cli::AnalyzeRequest request;
  std::map<std::string, std::vector<int>> first_sample;  // condition -> tokens of sample 0
  std::mutex mutex;                                        // guards qk
  // (condition, layer) -> q, k and, for a kv-bias model, the slot logits (H, T) of that pass.
  struct Captured {
    Tensor q, k, slot;
  };
  std::map<std::pair<std::string, int>, Captured> qk;
};

class Server {
 public:
  Server(Model model, std::unique_ptr<Tokenizer> tokenizer, std::vector<std::string> texts)
      : model_(std::move(model)), tokenizer_(std::move(tokenizer)), texts_(std::move(texts)) {
    Routes();
  }
  httplib::Server& http() { return http_; }

 private:
  // Wraps a handler: ss::Error -> 400 with its message, anything else -> 500; the server goes on.
  template <typename Fn>
  httplib::Server::Handler Handle(Fn fn) {
    return [fn](const httplib::Request& req, httplib::Response& res) {
      auto fail = [&](int status, const std::string& message) {
        res.status = status;
        res.set_content(Dump({{"error", message}}), "application/json");
      };
      try {
        res.set_content(Dump(fn(req)), "application/json");
      } catch (const HttpError& e) {
        fail(e.status, e.what());
      } catch (const Error& e) {
        fail(400, e.what());
      } catch (const json::exception& e) {
        fail(400, fmt::format("malformed request: {}", e.what()));
      } catch (const std::bad_alloc&) {
        fail(507, "out of memory");
      } catch (const std::exception& e) {
        fail(500, e.what());
      }
    };
  }

  static json Body(const httplib::Request& req) {
    json body = json::parse(req.body);  // rejects invalid UTF-8 in strings
    if (!body.is_object()) Fail("expected a JSON object");
    return body;
  }

  // The token stream of a request: "text" (sent by the page) or "file" (an index into --texts).
  cli::SampleStream StreamOf(const json& body, bool bos) const {
    cli::SampleStream s;
    std::string text;
    if (body.contains("file") && !body["file"].is_null()) {
      const int i = IntField(body, "file", -1, 0, static_cast<int>(texts_.size()) - 1);
      text = ReadInputFile(texts_[i], "--texts");
      s.source = "text " + texts_[i];
    } else {
      if (!body.contains("text") || !body["text"].is_string()) Fail("give a text or a file");
      text = body["text"].get<std::string>();
      s.source = "text (viewer)";
    }
    s.flag = "text";
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) Fail("the text is empty");
    s.tokens = tokenizer_->Encode(text, bos && tokenizer_->bos_id() >= 0);
    if (s.tokens.empty()) Fail("the text has no tokens");
    return s;
  }

  // The page's label of ids[i]: BOS and EOS decode to nothing, so they are named (position 0 then
  // has a label); other tokens as printed after the previous one.
  std::string Label(const std::vector<int>& ids, int i) const {
    const int id = ids[i];
    if (id == model_.config.bos_id) return "<bos>";
    if (id == model_.config.eos_id) return "<eos>";
    return tokenizer_->DecodeToken(i > 0 ? ids[i - 1] : -1, id);
  }

  std::vector<std::string> Labels(const std::vector<int>& ids) const {
    std::vector<std::string> out;
    out.reserve(ids.size());
    for (int i = 0; i < static_cast<int>(ids.size()); ++i) out.push_back(Label(ids, i));
    return out;
  }

  // samples, length and seed of an analyze or explain request.
  static cli::SampleOptions SampleOptionsOf(const json& body, int default_samples) {
    cli::SampleOptions o;
    o.samples = IntField(body, "samples", default_samples, 1, kMaxSamples);
    o.length = IntField(body, "length", 64, cli::SampleOptions::kMinLength, 1 << 20);
    o.seed = static_cast<uint64_t>(IntField(body, "seed", 0, 0, 1 << 30));
    return o;
  }

  std::shared_ptr<Run> FindRun(const httplib::Request& req) {
    const int id = QueryInt(req, "run", -1, 0, 1 << 30);
    std::lock_guard<std::mutex> lock(runs_mutex_);
    auto it = runs_.find(id);
    if (it == runs_.end()) throw HttpError(404, fmt::format("run {} is unknown or expired", id));
    return it->second;
  }

  // Thrown by the last hook a pattern request needs: the blocks after it would change nothing.
  struct StopForward {};

  // The queries and keys of one layer on the run's first sample of `condition`. One forward pass
  // captures every layer up to `layer` that is not cached yet and stops there (a T = 8192 pass of
  // all blocks is the slow part of the first click).
  const Run::Captured& QueryKeys(Run& run, const std::string& condition, int layer) {
    auto it = run.first_sample.find(condition);
    if (it == run.first_sample.end()) Fail("condition '{}' is not in this run", condition);
    std::lock_guard<std::mutex> lock(run.mutex);
    auto& slot = run.qk[{condition, layer}];
    if (slot.q.empty()) {
      const std::vector<int>& ids = it->second;
      const ModelConfig& c = model_.config;
      RunState state;
      Hooks hooks;
      for (int l = 0; l <= layer; ++l) {
        auto& s = run.qk[{condition, l}];
        if (!s.q.empty()) continue;
        hooks.Add(HookPoint::kQ, l, [&s](const HookContext&, Tensor& a) { s.q = a.Copy(); });
        hooks.Add(HookPoint::kK, l, [&s, &state, &c, l, layer](const HookContext&, Tensor& a) {
          s.k = a.Copy();
          if (c.attn_kv_bias) {  // this layer's slot logits, computed before RoPE (blocks.cpp)
            const int64_t n = static_cast<int64_t>(c.n_heads) * a.dim(0);
            s.slot = Tensor::Zeros({n});
            std::copy_n(state.slot_logits.data(), n, s.slot.data());
          }
          if (l == layer) throw StopForward{};
        });
      }
      KVCache cache = KVCache::CreateSingleUse(c, static_cast<int>(ids.size()));
      ForwardRequest fr;
      fr.tokens = ids;
      fr.logits = LogitsMode::kNone;
      fr.hooks = &hooks;
      try {
        Forward(model_, cache, state, fr);
      } catch (const StopForward&) {
      }
    }
    return slot;
  }

  json Analyze(const httplib::Request& req) {
    const json body = Body(req);
    cli::AnalyzeRequest r;
    r.input = SampleOptionsOf(body, 16);
    r.input.prompt_given = body.value("prompt", false);
    if (r.input.prompt_given) r.input.prompt = "given";
    r.conditions = analysis::ParseConditions(
        JoinList(body.value("conditions", json("bos,no-bos,random-p0,repeat")), "conditions"),
        "conditions");
    r.sink.eps = RealField(body, "eps", 0.3);
    r.allow_long_context = body.value("allow_long_context", false);
    cli::ValidateAnalyze(r);
    const cli::SampleStream input = StreamOf(body, /*bos=*/false);
    const analysis::AnalyzeReport rep = cli::RunAnalysis(model_, input, r);
    auto run = std::make_shared<Run>();
    run->request = r;
    json tokens = json::object();
    for (analysis::Condition cond : r.conditions) {
      const std::string name = analysis::ConditionName(cond);
      run->first_sample[name] = cli::AnalysisSamples(model_, input, r, cond)[0];
      tokens[name] = Labels(run->first_sample[name]);
    }
    int id;
    {
      std::lock_guard<std::mutex> lock(runs_mutex_);
      id = next_run_++;
      runs_[id] = run;
      while (static_cast<int>(runs_.size()) > kMaxRuns) runs_.erase(runs_.begin());
    }
    return {{"run", id}, {"report", analysis::ReportJson(rep)}, {"tokens", tokens}};
  }

  // The head a pattern or row request names, with its layer's queries and keys.
  struct HeadRequest {
    std::shared_ptr<Run> run;
    std::string condition;
    int layer = 0, head = 0, T = 0;
    const Tensor* q = nullptr;
    const Tensor* k = nullptr;
    const float* slot = nullptr;  // kv-bias slot logits (H, T), else null
  };
  HeadRequest ParseHead(const httplib::Request& req) {
    HeadRequest h;
    h.run = FindRun(req);
    const ModelConfig& c = model_.config;
    h.condition = req.get_param_value("condition");
    h.layer = QueryInt(req, "layer", -1, 0, c.n_layers - 1);
    h.head = QueryInt(req, "head", -1, 0, c.n_heads - 1);
    const Run::Captured& cap = QueryKeys(*h.run, h.condition, h.layer);
    h.q = &cap.q, h.k = &cap.k;
    h.slot = cap.slot.empty() ? nullptr : cap.slot.data();
    h.T = static_cast<int>(h.q->dim(0));
    return h;
  }

  json Pattern(const httplib::Request& req) {
    const HeadRequest h = ParseHead(req);
    const std::string& condition = h.condition;
    const int layer = h.layer, head = h.head, T = h.T;
    const Tensor *q = h.q, *k = h.k;
    const int q0 = QueryInt(req, "q0", 0, 0, T - 1), q1 = QueryInt(req, "q1", T, q0 + 1, T);
    const int k0 = QueryInt(req, "k0", 0, 0, T - 1), k1 = QueryInt(req, "k1", T, k0 + 1, T);
    const int bins = QueryInt(req, "bins", 256, 1, kMaxBins);
    const PatternTile t = ComputePatternTile(model_, layer, q->data(), k->data(), T, head, q0, q1, k0, k1, bins, h.slot);
    return {{"condition", condition}, {"layer", layer}, {"head", head}, {"tokens", T},
            {"q0", t.q0}, {"q1", t.q1}, {"k0", t.k0}, {"k1", t.k1}, {"rows", t.rows},
            {"cols", t.cols}, {"row_step", t.row_step}, {"col_step", t.col_step},
            {"pooling", "max"}, {"values", t.values}};
  }

  json Row(const httplib::Request& req) {
    const HeadRequest h = ParseHead(req);
    const int T = h.T;
    const auto& run = h.run;
    const std::string& condition = h.condition;
    const int head = h.head;
    const Tensor *q = h.q, *k = h.k;
    const int query = QueryInt(req, "query", -1, 0, T - 1);
    const int top = QueryInt(req, "top", 10, 1, 100);
    const std::vector<float> p = ComputePatternRow(model_, h.layer, q->data(), k->data(), T, head, query, h.slot);
    std::vector<int> order(query + 1);
    for (int j = 0; j <= query; ++j) order[j] = j;
    const int n = std::min(top, query + 1);
    std::partial_sort(order.begin(), order.begin() + n, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    const std::vector<int>& ids = run->first_sample.at(condition);
    json keys = json::array();
    for (int i = 0; i < n; ++i) {
      const int j = order[i];
      keys.push_back({{"position", j}, {"token", Label(ids, j)}, {"p", p[j]}});
    }
    return {{"query", query}, {"token", Label(ids, query)}, {"keys", keys}};
  }

  json Explain(const httplib::Request& req) {
    const json body = Body(req);
    cli::ExplainRequest r;
    r.input = SampleOptionsOf(body, 8);
    const auto conditions = analysis::ParseConditions(body.value("condition", std::string("bos")), "condition");
    if (conditions.size() != 1) Fail("condition: expected one condition");
    r.condition = conditions[0];
    r.options.intervention_samples = IntField(body, "intervention_samples", 4, 0, kMaxSamples);
    cli::ValidateExplain(r);
    const cli::SampleStream input = StreamOf(body, /*bos=*/false);
    return explain::ReportJson(cli::RunExplanation(model_, input, r));
  }

  json Stream(const httplib::Request& req) {
    const json body = Body(req);
    const std::string list = JoinList(body.value("policies", json("window,sinks")), "policies");
    std::vector<stream::StreamOptions> options;
    const int sinks = IntField(body, "sinks", 4, 0, 1 << 20), window = IntField(body, "window", 252, 1, 1 << 20);
    size_t start = 0;
    while (start <= list.size()) {
      const size_t comma = std::min(list.find(',', start), list.size());
      stream::StreamOptions o;
      o.policy = stream::ParsePolicy(list.substr(start, comma - start), "policies");
      o.sinks = sinks;
      o.window = window;
      stream::ValidateOptions(o, model_.config);
      options.push_back(o);
      start = comma + 1;
    }
    if (options.size() > 4) Fail("policies: at most 4");
    const int64_t max_tokens = IntField(body, "max_tokens", 20000, 2, static_cast<int>(kMaxStreamTokens));
    std::vector<int> tokens = StreamOf(body, /*bos=*/true).tokens;
    if (static_cast<int64_t>(tokens.size()) > max_tokens) tokens.resize(max_tokens);
    if (tokens.size() < 2) Fail("the text has {} token(s); at least two are needed", tokens.size());
    for (const auto& o : options)
      if (o.policy == stream::Policy::kDense && static_cast<int64_t>(tokens.size()) > model_.config.max_seq_len)
        Fail("dense: {} tokens is more than the model's context of {}", tokens.size(), model_.config.max_seq_len);
    std::vector<cli::StreamRun> runs;
    for (const auto& o : options)
      runs.push_back(cli::RunStreamPolicy(model_, o, tokens, nullptr, false, /*keep_nll=*/true));
    const cli::StreamDocument doc{model_.source, "text (viewer)", static_cast<int64_t>(tokens.size()),
                                  true, sinks, window, false, max_tokens};
    json out = cli::StreamJson(doc, runs);
    json nll = json::object();
    for (const auto& r : runs) nll[stream::PolicyName(r.policy)] = r.nll;
    out["nll"] = nll;
    return out;
  }

  json ModelInfo() const {
    const ModelConfig& c = model_.config;
    json texts = json::array();
    for (size_t i = 0; i < texts_.size(); ++i) texts.push_back({{"index", i}, {"name", texts_[i]}});
    return {{"path", model_.source}, {"format", model_.format}, {"arch", c.arch},
            {"n_layers", c.n_layers}, {"n_heads", c.n_heads}, {"dim", c.dim},
            {"vocab_size", c.vocab_size}, {"max_seq_len", c.max_seq_len},
            {"learned_positions", c.learned_pos}, {"texts", texts},
            {"default_text", std::string(cli::DefaultText())},
            {"limits", {{"body_bytes", kMaxBodyBytes}, {"bins", kMaxBins}, {"samples", kMaxSamples},
                        {"stream_tokens", kMaxStreamTokens}}}};
  }

  void Routes() {
    http_.set_payload_max_length(kMaxBodyBytes);
    http_.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(ViewerHtml()), "text/html; charset=utf-8");
    });
    http_.Get("/api/model", Handle([this](const httplib::Request&) { return ModelInfo(); }));
    http_.Post("/api/analyze", Handle([this](const httplib::Request& r) { return Analyze(r); }));
    http_.Get("/api/pattern", Handle([this](const httplib::Request& r) { return Pattern(r); }));
    http_.Get("/api/row", Handle([this](const httplib::Request& r) { return Row(r); }));
    http_.Post("/api/explain", Handle([this](const httplib::Request& r) { return Explain(r); }));
    http_.Post("/api/stream", Handle([this](const httplib::Request& r) { return Stream(r); }));
    // Anything else, including any path that looks like a file: 404 (nothing is served from disk).
    http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string message = fmt::format("{} {}: HTTP {}", req.method, req.path, res.status);
      if (res.status == 404) message = fmt::format("{} {}: not found", req.method, req.path);
      if (res.status == 413)
        message = fmt::format("{} {}: the request body is too large (at most {} bytes of JSON, sent "
                              "with Content-Type: application/json)", req.method, req.path, kMaxBodyBytes);
      res.set_content(Dump({{"error", message}}), "application/json");
    });
  }

  Model model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::string> texts_;
  httplib::Server http_;
  std::mutex runs_mutex_;
  std::map<int, std::shared_ptr<Run>> runs_;
  int next_run_ = 0;
};

struct ServeArgs {
  cli::ModelOptions model;
  std::vector<std::string> texts;
  std::string host = "127.0.0.1";
  int port = 8080;
};

void RunServe(const ServeArgs& a) {
  for (const std::string& t : a.texts) (void)ReadInputFile(t, "--texts");  // readable, within the cap
  cli::LoadedModel loaded = a.model.Load();
  if (a.host != "127.0.0.1" && a.host != "localhost" && a.host != "::1")
    cli::Log(fmt::format("warning: --host {}: the viewer is reachable from other machines; it has no "
                         "authentication and runs the model for anyone who can connect", a.host));
  Server server(std::move(loaded.model), std::move(loaded.tokenizer), a.texts);
  int port = a.port;
  if (port == 0) {
    port = server.http().bind_to_any_port(a.host);
    if (port < 0) Fail("--host {}: cannot bind", a.host);
  } else if (!server.http().bind_to_port(a.host, port)) {
    Fail("--host {} --port {}: cannot bind (in use?)", a.host, port);
  }
  std::printf("sinkscope serve: listening on http://%s:%d/\n", a.host.c_str(), port);
  std::fflush(stdout);
  if (!server.http().listen_after_bind()) Fail("the server stopped unexpectedly");
}

}  // namespace

void RegisterServe(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Interactive sink viewer in the browser (local web server)");
  auto a = std::make_shared<ServeArgs>();
  a->model.Add(cmd);
  cmd->add_option("--texts", a->texts, "Text files the page may choose from (nothing else is read)");
  cmd->add_option("--host", a->host, "Address to listen on (other than 127.0.0.1: warned)")
      ->capture_default_str();
  cmd->add_option("--port", a->port, "Port (0: any free port, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->callback([a] { RunServe(*a); });
}

}  // namespace ss::serve
