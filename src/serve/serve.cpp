#include "serve/serve.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string_view>
#include <tuple>

#include "analysis/analyze_report.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/verbs.h"
#include "common/error.h"
#include "common/file_util.h"
#include "common/interrupt.h"
#include "explain/explain_report.h"
#include "io/load.h"
#include "kernels/ops.h"
#include "model/attention.h"
#include "model/model.h"
#include "model/precision.h"
#include "serve/http.h"
#include "serve/request_body.h"
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
  // The layer's options (model/attention.h): the tiles show a rule's weights as they are (sigmoid
  // attention's unnormalised); one head against its kv head, so a per-head slot is this head's.
  const bool per_query_slot = ModelAttention(c).slot == AttnSlot::kPerQuery;
  if (per_query_slot && !slot_logits)
    Fail("layer {}: a kv-bias model's pattern needs the slot logits of the forward pass", layer);
  AttnOptions opt = LayerAttnOptions(c, model.weights.layers[layer], c.Window(layer), nullptr);
  if (opt.sink_logits) opt.sink_logits += head;
  opt.slot_values = nullptr;                      // the tiles read the weights only
  const float query_scale = c.QueryScale(layer);  // hook_q is taken before it
  const int kv_head = head / (H / Hkv);
  std::vector<float> kh(static_cast<size_t>(q1) * Dh), vh(static_cast<size_t>(q1) * Dh, 0.0f);
  for (int j = 0; j < q1; ++j)
    std::copy_n(k + (static_cast<size_t>(j) * Hkv + kv_head) * Dh, Dh,
                kh.data() + static_cast<size_t>(j) * Dh);
  std::vector<float> qh, out, probs;
  for (int b = q0; b < q1; b += kQueryBlock) {
    PollInterrupt();  // a T = 8192 tile is 64 blocks: its client may leave in between
    const int rows = std::min(kQueryBlock, q1 - b), S = b + rows;
    qh.resize(static_cast<size_t>(rows) * Dh);
    for (int r = 0; r < rows; ++r)
      for (int d = 0; d < Dh; ++d)
        qh[static_cast<size_t>(r) * Dh + d] =
            q[(static_cast<size_t>(b + r) * H + head) * Dh + d] * query_scale;
    out.resize(static_cast<size_t>(rows) * Dh);
    probs.assign(static_cast<size_t>(rows) * S, 0.0f);
    // The slot's logits of this head's queries b .. b + rows: (1, rows) for the one-head call.
    if (per_query_slot) opt.slot_logits = slot_logits + static_cast<int64_t>(head) * T + b;
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
  if (head < 0 || head >= c.n_heads)
    Fail("head {} is outside the model ({} heads)", head, c.n_heads);
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
  ForEachQueryBlock(model, layer, q, k, T, head, q0, q1, slot_logits,
                    [&](int first, int rows, int S, const float* p) {
                      for (int r = 0; r < rows; ++r) {
                        const float* row = p + static_cast<size_t>(r) * S;
                        float* cell_row =
                            t.values.data() +
                            static_cast<size_t>((first + r - q0) / t.row_step) * t.cols;
                        for (int j = k0; j < std::min(k1, S); ++j) {
                          float& cell = cell_row[(j - k0) / t.col_step];
                          cell = std::max(cell, row[j]);
                        }
                      }
                    });
  return t;
}

std::vector<float> ComputePatternRow(const Model& model, int layer, const float* q, const float* k,
                                     int T, int head, int query, const float* slot_logits) {
  const ModelConfig& c = model.config;
  if (head < 0 || head >= c.n_heads)
    Fail("head {} is outside the model ({} heads)", head, c.n_heads);
  if (query < 0 || query >= T) Fail("query {} is outside the {} tokens", query, T);
  std::vector<float> out(T, 0.0f);
  ForEachQueryBlock(model, layer, q, k, T, head, query, query + 1, slot_logits,
                    [&](int, int, int S, const float* p) { std::copy_n(p, S, out.data()); });
  return out;
}

// ---------------------------------------------------------------- the server

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxBodyBytes = size_t{8} << 20;  // a request's body: the text and settings
constexpr int kMaxBins = 1024;
constexpr int kMaxRuns = 8;  // analyses kept for the pattern view (oldest dropped)
static_assert(kMinLength == cli::SampleOptions::kMinLength);
constexpr int kMaxWaiting = 4;  // computations queued behind the running one; more: 503
constexpr auto kPollInterval = std::chrono::milliseconds(20);  // checks for a client gone

// Replies carry token strings, which may hold partial UTF-8 sequences (byte pieces): replaced.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

struct HttpError : Error {
  int status;
  HttpError(int s, const std::string& m) : Error(m), status(s) {}
};

// A request's value for a message: at most 40 bytes, escaped as every message is (common/error.h).
std::string Shown(std::string_view s) { return PrintableExcerpt(s, 40); }

// A query parameter that must be a decimal integer: digits with an optional leading '-', nothing
// else (no spaces, '+', NUL or trailing bytes, which strtoll would skip or stop at).
int QueryInt(const http::Request& req, const char* key, int fallback, int lo, int hi) {
  const std::string* s = req.Param(key);
  if (!s) {
    if (fallback < lo) Fail("missing parameter '{}'", key);
    return fallback;
  }
  bool ok = !s->empty() && s->size() <= 11;
  for (size_t i = 0; ok && i < s->size(); ++i)
    ok = ((*s)[i] >= '0' && (*s)[i] <= '9') || (i == 0 && (*s)[i] == '-' && s->size() > 1);
  const long long v = ok ? std::stoll(*s) : 0;
  if (!ok || v < lo || v > hi)
    Fail("{}: expected an integer in [{}, {}], got '{}'", key, lo, hi, Shown(*s));
  return static_cast<int>(v);
}

// 2 x the multiply-adds of a T-token forward: every weight once per token (projections, MLP,
// unembedding) and causal attention (Q K^T and P V, T^2 / 2 query-key pairs each, per head).
// An upper bound where layers have windows; MoE counted at its expert width.
double ForwardFlop(const ModelConfig& c, double T) {
  const double per_token =
      c.n_layers * (static_cast<double>(c.dim) * (c.q_dim() + 2.0 * c.kv_dim()) +
                    static_cast<double>(c.q_dim()) * c.dim +
                    static_cast<double>(c.dim) * c.hidden_dim * (c.gated_mlp ? 3 : 2)) +
      static_cast<double>(c.dim) * c.vocab_size;
  return 2.0 * T * per_token + 2.0 * c.n_layers * c.n_heads * c.head_dim * T * T;
}

// A per-launch secret: 128 bits from the system's random source, as hex.
std::string RandomHex(int bytes) {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < bytes; i += 4) out += fmt::format("{:08x}", static_cast<uint32_t>(rd()));
  return out.substr(0, 2 * bytes);
}

// Compares two secrets in time that does not depend on where they differ.
bool SameSecret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

struct Run {
  cli::AnalyzeRequest request;
  std::map<std::string, std::vector<int>> first_sample;  // condition -> tokens of sample 0
  std::mutex mutex;                                      // guards qk
  // (condition, layer) -> q, k and, for a kv-bias model, the slot logits (H, T) of that pass.
  struct Captured {
    Tensor q, k, slot;
  };
  std::map<std::pair<std::string, int>, Captured> qk;
};

// One computation (analyze, explain, stream) at a time: the model uses every core, so two would
// only slow each other. Up to kMaxWaiting wait behind it; more are answered 503 at once. A waiting
// request whose client leaves drops out of the queue (its poll throws).
class WorkGate {
 public:
  void Enter(const std::function<void()>& poll) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (busy_ && waiting_ >= kMaxWaiting)
      throw HttpError(503, fmt::format("the server is busy (one computation runs and {} wait): try "
                                       "again when they end",
                                       waiting_));
    ++waiting_;
    while (busy_) {
      cv_.wait_for(lock, kPollInterval);
      lock.unlock();
      try {
        poll();
      } catch (...) {
        lock.lock();
        --waiting_;
        throw;
      }
      lock.lock();
    }
    --waiting_;
    busy_ = true;
  }
  void Leave() {
    std::lock_guard<std::mutex> lock(mutex_);
    busy_ = false;
    cv_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool busy_ = false;
  int waiting_ = 0;
};

struct ServeArgs {
  cli::ModelOptions model;
  std::vector<std::string> texts;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<std::string> allow_hosts;  // Host names accepted besides localhost and --host
  std::string token;                     // "" generates one; see --token
  bool no_token = false;
  double max_request_tflop = 100;
};

class Server {
 public:
  Server(Model model, std::unique_ptr<Tokenizer> tokenizer, const ServeArgs& args)
      : model_(std::move(model)),
        tokenizer_(std::move(tokenizer)),
        texts_(args.texts),
        args_(args) {
    if (!args.no_token) token_ = args.token.empty() ? RandomHex(16) : args.token;
    for (const std::string& h :
         {std::string("localhost"), std::string("127.0.0.1"), std::string("[::1]"),
          args.host.find(':') != std::string::npos ? "[" + args.host + "]" : args.host})
      hosts_.push_back(h);
    for (const std::string& h : args.allow_hosts) hosts_.push_back(h);
    for (std::string& h : hosts_)
      for (char& ch : h) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    // What replies must not show: the model's and the texts' paths, as given and absolute.
    auto hide = [this](const std::string& path) {
      if (path.empty()) return;
      const std::string name = std::filesystem::path(path).filename().string();
      std::error_code ec;
      const std::string abs = std::filesystem::absolute(path, ec).lexically_normal().string();
      for (const std::string& p : {abs, path})
        if (!p.empty() && p != name) hidden_.emplace_back(Dump(json(p)), Dump(json(name)));
    };
    hide(model_.source);
    for (const std::string& t : texts_) hide(t);
    std::sort(hidden_.begin(), hidden_.end(),
              [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    Routes();
  }
  http::Server& http() { return http_; }
  const std::string& token() const { return token_; }

 private:
  // Replaces the hidden paths in a reply (quoted JSON strings: the quotes are dropped to match
  // inside messages too) by their file names.
  std::string Scrub(std::string body) const {
    for (const auto& [path, name] : hidden_) {
      const std::string from = path.substr(1, path.size() - 2),
                        to = name.substr(1, name.size() - 2);
      for (size_t at = body.find(from); at != std::string::npos;
           at = body.find(from, at + to.size()))
        body.replace(at, from.size(), to);
    }
    return body;
  }

  void Reply(http::Response& res, int status, const json& doc) const {
    res.status = status;
    res.content_type = "application/json";
    res.body = Scrub(Dump(doc));
  }

  // Wraps a handler: ss::Error -> 400 with its message (HttpError: its status), anything else ->
  // 500; the server goes on. The client's departure (http::ClientGone, thrown by the interrupt
  // poll) ends the work and the connection.
  template <typename Fn>
  http::Handler Handle(Fn fn) {
    return [this, fn](const http::Request& req, http::Response& res) {
      const int fd = req.socket;
      Clock::time_point last{};
      ScopedInterruptPoll poll([fd, last]() mutable {
        const Clock::time_point now = Clock::now();
        if (now - last < kPollInterval) return;
        last = now;
        if (http::PeerClosed(fd)) throw http::ClientGone{};
      });
      try {
        // A model file replaced or truncated under the server's mapping: refused, not a SIGBUS.
        try {
          CheckMappedFilesUnchanged();
        } catch (const Error& e) {
          throw HttpError(503, fmt::format("{}; restart serve", e.what()));
        }
        Reply(res, 200, fn(req));
      } catch (const http::ClientGone&) {
        cli::Log(fmt::format("serve: {} {}: the client left; its work was stopped", req.method,
                             req.path));
        throw;
      } catch (const HttpError& e) {
        Reply(res, e.status, {{"error", e.what()}});
      } catch (const Error& e) {
        Reply(res, 400, {{"error", e.what()}});
      } catch (const json::exception& e) {
        Reply(res, 400, {{"error", fmt::format("malformed request: {}", e.what())}});
      } catch (const std::bad_alloc&) {
        Reply(res, 507, {{"error", "out of memory"}});
      } catch (const std::exception& e) {
        Reply(res, 500, {{"error", e.what()}});
      }
    };
  }

  // Runs `fn` as the one computation (WorkGate), after checking its estimated cost.
  template <typename Fn>
  json Computation(const char* what, double flop, Fn fn) {
    const double limit = args_.max_request_tflop * 1e12;
    if (flop > limit)
      Fail(
          "this {} needs about {:.3g} TFLOP, more than the server's limit of {:.3g} TFLOP per "
          "request "
          "(--max-request-tflop): ask for fewer samples or a shorter length",
          what, flop / 1e12, args_.max_request_tflop);
    gate_.Enter([] { PollInterrupt(); });
    struct Release {
      WorkGate& g;
      ~Release() { g.Leave(); }
    } release{gate_};
    return fn();
  }

  // The checks every request passes before its body is read (docs/SERVE.md, "Who may call"):
  // the Host names this server (DNS rebinding), an Origin, if sent, is this server's own, the
  // token, and POSTs carry JSON (a cross-site form or a "simple" fetch cannot send that without
  // a preflight, which is never granted).
  bool Guard(const http::Request& req, http::Response& res) {
    auto refuse = [&](int status, const std::string& message) {
      refused_++;
      cli::Log(fmt::format("serve: refused {} {} ({}): {}", req.method, req.path, status,
                           Shown(message)));
      Reply(res, status, {{"error", message}});
      return true;
    };
    const std::string* host = req.Header("host");
    if (!host) return refuse(400, "the request has no Host header");
    if (!AllowedAuthority(*host))
      return refuse(403, fmt::format("Host '{}' does not name this server (allowed: {}; more with "
                                     "--allow-host)",
                                     Shown(*host), AllowedList()));
    if (const std::string* origin = req.Header("origin")) {
      const std::string prefix = "http://";
      if (origin->compare(0, prefix.size(), prefix) != 0 ||
          !AllowedAuthority(origin->substr(prefix.size())))
        return refuse(403, fmt::format("cross-origin request from '{}' refused: the viewer answers "
                                       "only its own page",
                                       Shown(*origin)));
    }
    if (const std::string* site = req.Header("sec-fetch-site"); site && *site == "cross-site")
      return refuse(403, "cross-site request refused: the viewer answers only its own page");
    if (!token_.empty() && !HasToken(req))
      return refuse(403,
                    "missing or wrong token: open the address that 'sinkscope serve' printed "
                    "(it ends in ?token=...), or send the token as X-Sinkscope-Token");
    if (req.method == "POST") {
      const std::string* type = req.Header("content-type");
      std::string media = type ? type->substr(0, type->find(';')) : "";
      while (!media.empty() && media.back() == ' ') media.pop_back();
      for (char& ch : media) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (media != "application/json")
        return refuse(415, fmt::format("POST {}: send the body as Content-Type: application/json "
                                       "(got '{}')",
                                       req.path, Shown(type ? *type : "")));
    }
    return false;
  }

  // "name[:port]" or "[v6]:port": the name one of hosts_ (or --allow-host '*'), the port ours.
  bool AllowedAuthority(const std::string& authority) const {
    std::string name = authority, port;
    const size_t bracket = authority.rfind(']'), colon = authority.rfind(':');
    if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
      name = authority.substr(0, colon);
      port = authority.substr(colon + 1);
    }
    if (port.empty() ? http_.port() != 80 : port != std::to_string(http_.port())) return false;
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (const std::string& h : hosts_)
      if (h == "*" || h == name) return true;
    return false;
  }
  std::string AllowedList() const {
    std::string out;
    for (const std::string& h : hosts_) out += (out.empty() ? "" : ", ") + h;
    return out;
  }

  std::string CookieName() const { return fmt::format("sinkscope_token_{}", http_.port()); }

  // The token as ?token=, X-Sinkscope-Token or the cookie the page got with it.
  bool HasToken(const http::Request& req) const {
    if (const std::string* t = req.Param("token"); t && SameSecret(*t, token_)) return true;
    if (const std::string* t = req.Header("x-sinkscope-token"); t && SameSecret(*t, token_))
      return true;
    const std::string want = CookieName() + "=";
    for (const auto& [k, v] : req.headers) {
      if (k != "cookie") continue;
      size_t start = 0;
      while (start < v.size()) {
        const size_t semi = std::min(v.find(';', start), v.size());
        std::string_view c = std::string_view(v).substr(start, semi - start);
        while (!c.empty() && c.front() == ' ') c.remove_prefix(1);
        if (c.substr(0, want.size()) == want && SameSecret(c.substr(want.size()), token_))
          return true;
        start = semi + 1;
      }
    }
    return false;
  }

  // The token stream of a request: "text" (sent by the page) or "file" (an index into --texts).
  cli::SampleStream StreamOf(const BodyInput& in, bool bos) const {
    cli::SampleStream s;
    std::string text;
    if (in.file >= 0) {
      text = ReadInputFile(texts_[in.file], "--texts");
      s.source = "text " + std::filesystem::path(texts_[in.file]).filename().string();
    } else {
      text = in.text;
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

  static cli::SampleOptions SampleOptionsOf(int samples, int length, uint64_t seed) {
    cli::SampleOptions o;
    o.samples = samples;
    o.length = length;
    o.seed = seed;
    return o;
  }

  int TextCount() const { return static_cast<int>(texts_.size()); }

  std::shared_ptr<Run> FindRun(const http::Request& req) {
    const std::string* id = req.Param("run");
    if (!id) Fail("missing parameter 'run'");
    std::lock_guard<std::mutex> lock(runs_mutex_);
    auto it = runs_.find(*id);
    if (it == runs_.end())
      throw HttpError(404, fmt::format("run '{}' is unknown or expired", Shown(*id)));
    return it->second;
  }

  // Thrown by the last hook a pattern request needs: the blocks after it would change nothing.
  struct StopForward {};

  // The queries and keys of one layer on the run's first sample of `condition`. One forward pass
  // captures every layer up to `layer` that is not cached yet and stops there (a T = 8192 pass of
  // all blocks is the slow part of the first click).
  const Run::Captured& QueryKeys(Run& run, const std::string& condition, int layer) {
    auto it = run.first_sample.find(condition);
    if (it == run.first_sample.end()) Fail("condition '{}' is not in this run", Shown(condition));
    std::lock_guard<std::mutex> lock(run.mutex);
    auto& slot = run.qk[{condition, layer}];
    if (slot.q.empty()) {
      const std::vector<int>& ids = it->second;
      const ModelConfig& c = model_.config;
      RunState state;
      Hooks hooks;
      std::vector<std::pair<std::string, int>>
          captured;  // dropped again if the forward stops early
      for (int l = 0; l <= layer; ++l) {
        auto& s = run.qk[{condition, l}];
        if (!s.q.empty()) continue;
        captured.emplace_back(condition, l);
        hooks.Add(HookPoint::kQ, l, [&s](const HookContext&, Tensor& a) { s.q = a.Copy(); });
        hooks.Add(HookPoint::kK, l, [&s, &state, &c, l, layer](const HookContext&, Tensor& a) {
          s.k = a.Copy();
          if (ModelAttention(c).slot ==
              AttnSlot::kPerQuery) {  // this layer's slot logits, computed before RoPE (blocks.cpp)
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
      } catch (...) {  // the client left (or the pass failed): no half-captured layer stays cached
        for (const auto& key : captured) run.qk.erase(key);
        throw;
      }
    }
    return slot;
  }

  json Analyze(const http::Request& req) {
    const AnalyzeBody body = ReadAnalyzeBody(req.body, TextCount());
    cli::AnalyzeRequest r;
    r.input = SampleOptionsOf(body.samples, body.length, body.seed);
    r.input.prompt_given = body.prompt;
    if (r.input.prompt_given) r.input.prompt = "given";
    r.conditions = analysis::ParseConditions(body.conditions, "conditions");
    r.sink.eps = body.eps;
    r.allow_long_context = body.allow_long_context;
    r.allow_long_name = "allow_long_context";
    cli::ValidateAnalyze(r);
    const cli::SampleStream input = StreamOf(body.input, /*bos=*/false);
    // The context first: its message says more than the cost's would.
    if (!r.input.prompt_given)
      cli::CheckLength(model_.config, r.input.length, r.allow_long_context, "allow_long_context",
                       "length");
    const double length =
        r.input.prompt_given ? static_cast<double>(input.tokens.size()) : r.input.length;
    const double flop = static_cast<double>(r.conditions.size()) *
                        (r.input.prompt_given ? 1 : r.input.samples) *
                        ForwardFlop(model_.config, length);
    return Computation("analysis", flop, [&] {
      const analysis::AnalyzeReport rep = cli::RunAnalysis(model_, input, r);
      auto run = std::make_shared<Run>();
      run->request = r;
      json tokens = json::object();
      for (analysis::Condition cond : r.conditions) {
        const std::string name = analysis::ConditionName(cond);
        run->first_sample[name] = cli::AnalysisSamples(model_, input, r, cond)[0];
        tokens[name] = Labels(run->first_sample[name]);
      }
      // Run ids are random per run: another server's (or an earlier launch's) ids name nothing
      // here.
      const std::string id = RandomHex(8);
      {
        std::lock_guard<std::mutex> lock(runs_mutex_);
        runs_[id] = run;
        run_order_.push_back(id);
        while (static_cast<int>(run_order_.size()) > kMaxRuns) {
          runs_.erase(run_order_.front());
          run_order_.pop_front();
        }
      }
      served_analyze_++;
      return json{{"run", id}, {"report", analysis::ReportJson(rep)}, {"tokens", tokens}};
    });
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
  HeadRequest ParseHead(const http::Request& req) {
    HeadRequest h;
    h.run = FindRun(req);
    const ModelConfig& c = model_.config;
    const std::string* condition = req.Param("condition");
    if (!condition) Fail("missing parameter 'condition'");
    h.condition = *condition;
    h.layer = QueryInt(req, "layer", -1, 0, c.n_layers - 1);
    h.head = QueryInt(req, "head", -1, 0, c.n_heads - 1);
    const Run::Captured& cap = QueryKeys(*h.run, h.condition, h.layer);
    h.q = &cap.q, h.k = &cap.k;
    h.slot = cap.slot.empty() ? nullptr : cap.slot.data();
    h.T = static_cast<int>(h.q->dim(0));
    return h;
  }

  json Pattern(const http::Request& req) {
    const HeadRequest h = ParseHead(req);
    const std::string& condition = h.condition;
    const int layer = h.layer, head = h.head, T = h.T;
    const Tensor *q = h.q, *k = h.k;
    const int q0 = QueryInt(req, "q0", 0, 0, T - 1), q1 = QueryInt(req, "q1", T, q0 + 1, T);
    const int k0 = QueryInt(req, "k0", 0, 0, T - 1), k1 = QueryInt(req, "k1", T, k0 + 1, T);
    const int bins = QueryInt(req, "bins", 256, 1, kMaxBins);
    const PatternTile t = ComputePatternTile(model_, layer, q->data(), k->data(), T, head, q0, q1,
                                             k0, k1, bins, h.slot);
    return {{"condition", condition},
            {"layer", layer},
            {"head", head},
            {"tokens", T},
            {"q0", t.q0},
            {"q1", t.q1},
            {"k0", t.k0},
            {"k1", t.k1},
            {"rows", t.rows},
            {"cols", t.cols},
            {"row_step", t.row_step},
            {"col_step", t.col_step},
            {"pooling", "max"},
            {"values", t.values}};
  }

  json Row(const http::Request& req) {
    const HeadRequest h = ParseHead(req);
    const int T = h.T;
    const auto& run = h.run;
    const std::string& condition = h.condition;
    const int head = h.head;
    const Tensor *q = h.q, *k = h.k;
    const int query = QueryInt(req, "query", -1, 0, T - 1);
    const int top = QueryInt(req, "top", 10, 1, 100);
    const std::vector<float> p =
        ComputePatternRow(model_, h.layer, q->data(), k->data(), T, head, query, h.slot);
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

  json Explain(const http::Request& req) {
    const ExplainBody body = ReadExplainBody(req.body, TextCount());
    cli::ExplainRequest r;
    r.input = SampleOptionsOf(body.samples, body.length, body.seed);
    const auto conditions = analysis::ParseConditions(body.condition, "condition");
    if (conditions.size() != 1) Fail("condition: expected one condition");
    r.condition = conditions[0];
    r.options.intervention_samples = body.intervention_samples;
    cli::ValidateExplain(r);
    const cli::SampleStream input = StreamOf(body.input, /*bos=*/false);
    // docs/EXPLAIN.md: a clean forward per sample and, per intervention sample, 2 L + L H + 1 +
    // (L - 1) + 1 forwards and one recording pass (the greedy search comes on top, bounded by
    // --max-components passes of the same size: counted as L H once more).
    const ModelConfig& c = model_.config;
    cli::CheckLength(c, r.input.length, /*allow_long=*/false, /*allow_name=*/{}, "length");
    const double per_intervention =
        2.0 * c.n_layers + 2.0 * c.n_layers * c.n_heads + c.n_layers + 2;
    const double flop = (r.input.samples + r.options.intervention_samples * per_intervention) *
                        ForwardFlop(c, r.input.length);
    return Computation("explanation", flop, [&] {
      json out = explain::ReportJson(cli::RunExplanation(model_, input, r));
      served_explain_++;
      return out;
    });
  }

  json Stream(const http::Request& req) {
    const StreamBody body = ReadStreamBody(req.body, TextCount());
    const std::string& list = body.policies;
    std::vector<stream::StreamOptions> options;
    const int sinks = body.sinks, window = body.window;
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
    const int64_t max_tokens = body.max_tokens;
    std::vector<int> tokens = StreamOf(body.input, /*bos=*/true).tokens;
    if (static_cast<int64_t>(tokens.size()) > max_tokens) tokens.resize(max_tokens);
    if (tokens.size() < 2) Fail("the text has {} token(s); at least two are needed", tokens.size());
    const ModelConfig& c = model_.config;
    double flop = 0;
    for (const auto& o : options) {
      if (o.policy == stream::Policy::kDense && static_cast<int64_t>(tokens.size()) > c.max_seq_len)
        Fail("dense: {} tokens is more than the model's context of {}", tokens.size(),
             c.max_seq_len);
      // Each token's forward attends to at most the kept entries (all of them for dense).
      const double kept = o.policy == stream::Policy::kDense ? static_cast<double>(tokens.size())
                                                             : static_cast<double>(sinks) + window;
      flop += static_cast<double>(tokens.size()) *
              (ForwardFlop(c, 1) + 4.0 * c.n_layers * c.n_heads * c.head_dim * kept);
    }
    return Computation("stream", flop, [&] {
      std::vector<cli::StreamRun> runs;
      for (const auto& o : options)
        runs.push_back(cli::RunStreamPolicy(model_, o, tokens, nullptr, false, /*keep_nll=*/true));
      const cli::StreamDocument doc{
          model_.source, "text (viewer)", static_cast<int64_t>(tokens.size()), true, sinks, window,
          false,         max_tokens,      PrecisionName(model_.precision)};
      json out = cli::StreamJson(doc, runs);
      json nll = json::object();
      for (const auto& r : runs) nll[stream::PolicyName(r.policy)] = r.nll;
      out["nll"] = nll;
      served_stream_++;
      return out;
    });
  }

  json ModelInfo() const {
    const ModelConfig& c = model_.config;
    json texts = json::array();
    for (size_t i = 0; i < texts_.size(); ++i)
      texts.push_back(
          {{"index", i}, {"name", std::filesystem::path(texts_[i]).filename().string()}});
    return {{"path", std::filesystem::path(model_.source).filename().string()},
            {"format", model_.format},
            {"arch", c.arch},
            {"n_layers", c.n_layers},
            {"n_heads", c.n_heads},
            {"dim", c.dim},
            {"vocab_size", c.vocab_size},
            {"max_seq_len", c.max_seq_len},
            {"learned_positions", c.learned_pos},
            {"texts", texts},
            {"default_text", std::string(cli::DefaultText())},
            {"limits",
             {{"body_bytes", kMaxBodyBytes},
              {"bins", kMaxBins},
              {"samples", kMaxSamples},
              {"stream_tokens", kMaxStreamTokens},
              {"request_tflop", args_.max_request_tflop},
              {"queued_computations", kMaxWaiting}}},
            {"served",
             {{"analyze", served_analyze_.load()},
              {"explain", served_explain_.load()},
              {"stream", served_stream_.load()},
              {"refused", refused_.load()}}}};
  }

  void Routes() {
    http_.SetGuard(
        [this](const http::Request& req, http::Response& res) { return Guard(req, res); });
    http_.SetErrorBody(
        [this](const http::Request& req, http::Response& res, const std::string& message) {
          res.content_type = "application/json";
          const std::string where =
              req.method.empty() ? "" : fmt::format("{} {}: ", req.method, Shown(req.path));
          res.body = Scrub(Dump({{"error", where + message}}));
        });
    http_.Route("GET", "/", [this](const http::Request& req, http::Response& res) {
      res.content_type = "text/html; charset=utf-8";
      res.body = std::string(ViewerHtml());
      // The page's own scripts and styles are inline; it fetches from this origin only and may
      // not be framed by another page.
      res.headers.emplace_back(
          "Content-Security-Policy",
          "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
          "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
      res.headers.emplace_back("X-Frame-Options", "DENY");
      res.headers.emplace_back("Referrer-Policy", "no-referrer");
      if (!token_.empty() && req.Param("token"))
        res.headers.emplace_back(
            "Set-Cookie",
            fmt::format("{}={}; Path=/; HttpOnly; SameSite=Strict", CookieName(), token_));
    });
    http_.Route("GET", "/api/model", Handle([this](const http::Request&) { return ModelInfo(); }));
    http_.Route("POST", "/api/analyze",
                Handle([this](const http::Request& r) { return Analyze(r); }));
    http_.Route("GET", "/api/pattern",
                Handle([this](const http::Request& r) { return Pattern(r); }));
    http_.Route("GET", "/api/row", Handle([this](const http::Request& r) { return Row(r); }));
    http_.Route("POST", "/api/explain",
                Handle([this](const http::Request& r) { return Explain(r); }));
    http_.Route("POST", "/api/stream",
                Handle([this](const http::Request& r) { return Stream(r); }));
  }

  static http::Limits ServerLimits() {
    http::Limits l;
    l.max_body_bytes = kMaxBodyBytes;
    return l;
  }

  Model model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::string> texts_;
  const ServeArgs& args_;
  std::string token_;
  std::vector<std::string> hosts_;
  std::vector<std::pair<std::string, std::string>> hidden_;  // (path, file name), JSON-quoted
  http::Server http_{ServerLimits()};
  WorkGate gate_;
  std::mutex runs_mutex_;
  std::map<std::string, std::shared_ptr<Run>> runs_;
  std::deque<std::string> run_order_;
  std::atomic<int64_t> served_analyze_{0}, served_explain_{0}, served_stream_{0}, refused_{0};
};

void RunServe(const ServeArgs& a) {
  if (a.max_request_tflop <= 0 || !std::isfinite(a.max_request_tflop))
    Fail("--max-request-tflop: expected a positive number, got {}", a.max_request_tflop);
  if (!a.token.empty() && a.no_token) Fail("--token and --no-token: give one of them");
  if (!a.token.empty() &&
      (a.token.size() < 16 || a.token.size() > 256 ||
       a.token.find_first_not_of(
           "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_.~") !=
           std::string::npos))
    Fail("--token: expected 16 to 256 letters, digits or -_.~");
  for (const std::string& h : a.allow_hosts)
    if (h.empty() || h.find_first_of(" /\\?#@\t") != std::string::npos)
      Fail("--allow-host: '{}' is not a host name", Shown(h));
  for (const std::string& t : a.texts)
    (void)ReadInputFile(t, "--texts");  // readable, within the cap
  cli::LoadedModel loaded = a.model.Load();
  // From here one request's broken invariant answers that request with a 500, not the end of the
  // server (the request's own work is dropped; nothing it shares with others is left half-done).
  SetAssertionsThrow(true);
  if (a.host != "127.0.0.1" && a.host != "localhost" && a.host != "::1")
    cli::Log(
        fmt::format("warning: --host {}: the viewer is reachable from other machines; anyone who "
                    "has the token can run the model",
                    a.host));
  if (a.no_token)
    cli::Log(
        "warning: --no-token: any program on this machine that can connect may use the viewer");
  Server server(std::move(loaded.model), std::move(loaded.tokenizer), a);
  const int port = server.http().Bind(a.host, a.port);
  const std::string shown_host =
      a.host.find(':') != std::string::npos ? "[" + a.host + "]" : a.host;
  const std::string query = server.token().empty() ? "" : "?token=" + server.token();
  std::printf("sinkscope serve: listening on http://%s:%d/%s\n", shown_host.c_str(), port,
              query.c_str());
  std::fflush(stdout);
  server.http().Run();
}

}  // namespace

void RegisterServe(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("serve", "Interactive sink viewer in the browser (local web server)");
  auto a = std::make_shared<ServeArgs>();
  a->model.Add(cmd);
  cmd->add_option("--texts", a->texts,
                  "Text files the page may choose from (nothing else is read)");
  cmd->add_option("--host", a->host, "Address to listen on (other than 127.0.0.1: warned)")
      ->capture_default_str();
  cmd->add_option("--port", a->port, "Port (0: any free port, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option(
      "--allow-host", a->allow_hosts,
      "Host name the page may be reached by, besides localhost, 127.0.0.1, [::1] and --host "
      "(repeatable; '*' allows any, which also allows DNS rebinding)");
  cmd->add_option(
      "--token", a->token,
      "The secret the page and API calls must carry (default: a new random one per launch, "
      "printed in the address)");
  cmd->add_flag("--no-token", a->no_token,
                "Accept requests without a token (any local program may call)");
  cmd->add_option("--max-request-tflop", a->max_request_tflop,
                  "Largest estimated cost of one analyze, explain or stream request, in TFLOP")
      ->capture_default_str();
  cmd->callback([a] { RunServe(*a); });
}

}  // namespace ss::serve
