// The Python extension `sinkscope._sinkscope` (docs/PYTHON.md): the engine and the verbs'
// computations (cli/verbs.h, the same code the command line runs) with numpy arrays in and out. The
// pure-Python package around it (python/sinkscope/__init__.py) adds keyword defaults,
// FileNotFoundError for missing paths and the plots.
//
// Threads and signals: every call that runs the model releases the GIL. A Python hook re-acquires
// it for its call; the verbs' progress points (report::Progress) poll for Ctrl-C, so analyze,
// explain, trace and stream stop with KeyboardInterrupt at their next sample, forward pass,
// checkpoint or 64 tokens. Errors: ss::Error becomes sinkscope.Error (a ValueError) with the
// engine's message.
#include <fmt/format.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "analysis/analyze_report.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/verbs.h"
#include "common/error.h"
#include "common/file_util.h"
#include "explain/explain_report.h"
#include "hooks/hooks.h"
#include "io/load.h"
#include "kernels/dequant.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_ggml.h"
#include "kernels/gemm_q8.h"
#include "kernels/parallel.h"
#include "model/attention.h"
#include "model/model.h"
#include "model/precision.h"
#include "report/report.h"
#include "stream/stream.h"
#include "tokenizer/find.h"
#include "tokenizer/tokenizer.h"
#include "trace/trace.h"

namespace py = pybind11;

namespace ss::python {
namespace {

// Thrown through the engine (never caught by its `catch (const std::exception&)` clauses) when a
// Python error is pending: Ctrl-C seen at a progress point, or a hook that raised. The binding
// turns it back into that Python exception.
struct PythonErrorPending {};

using FloatArray = py::array_t<float, py::array::c_style>;

// A numpy copy of `n` floats shaped `shape`.
FloatArray ToNumpy(const float* data, const std::vector<int64_t>& shape) {
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  FloatArray out(dims);
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  if (n) std::memcpy(out.mutable_data(), data, n * sizeof(float));
  return out;
}

template <typename T>
py::array_t<T> VectorToNumpy(const std::vector<T>& v, std::vector<py::ssize_t> shape) {
  py::array_t<T> out(shape);
  if (!v.empty()) std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(T));
  return out;
}

// Runs `work` without the GIL, with Ctrl-C polled at every progress point.
template <typename F>
auto RunReleased(F&& work) {
  report::ScopedProgressPoll poll([] {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw PythonErrorPending{};
  });
  try {
    py::gil_scoped_release release;
    return work();
  } catch (const PythonErrorPending&) {
    throw py::error_already_set();
  }
}

// Token ids from a Python sequence or a 1-D integer array, checked against the vocabulary.
std::vector<int> ToIds(const py::handle& ids, int vocab_size, const char* what) {
  py::array arr = py::array::ensure(ids);
  if (!arr || arr.ndim() != 1)
    throw Error(fmt::format("{}: expected a 1-D sequence of token ids", what));
  if (arr.size() > 0 && !py::isinstance<py::array_t<int64_t>>(arr) &&
      !(arr.dtype().kind() == 'i' || arr.dtype().kind() == 'u'))
    throw Error(fmt::format("{}: expected integer token ids, got dtype {}", what,
                            py::str(arr.dtype()).cast<std::string>()));
  // Unsigned ids are read as uint64 and signed ones as int64, so that every id is checked (and
  // named in the message) as it was given: 2^63 + 5 in a uint64 array is not a negative number.
  auto convert = [&](auto typed) {
    std::vector<int> out(static_cast<size_t>(typed.size()));
    for (py::ssize_t i = 0; i < typed.size(); ++i) {
      const auto id = typed.data()[i];
      bool negative = false;
      if constexpr (std::is_signed_v<std::remove_const_t<decltype(id)>>) negative = id < 0;
      if (negative || static_cast<uint64_t>(id) >= static_cast<uint64_t>(vocab_size))
        throw Error(fmt::format("{}: token id {} at index {} is outside the vocabulary (0..{})",
                                what, id, i, vocab_size - 1));
      out[static_cast<size_t>(i)] = static_cast<int>(id);
    }
    return out;
  };
  if (arr.dtype().kind() == 'u')
    return convert(py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(arr));
  return convert(py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(arr));
}

// ---- The model object.

class PyModel {
 public:
  // A tokenizer given by path is loaded (and checked against the model) here, so that a wrong
  // file fails at load naming it; the one found beside the model waits for the first call that
  // needs it (a model read only through token ids may have none).
  PyModel(const std::string& path, const std::string& tokenizer, const std::string& precision)
      : tokenizer_path_(tokenizer) {
    // Not given: the file's own, as the CLI's (native, or f32 for an all-F32 file).
    const Precision p = precision.empty() ? FilePrecision(path) : ParsePrecision(precision);
    model_ = LoadModel(path, p);
    if (!tokenizer_path_.empty()) tokenizer_ = FindTokenizer(model_, tokenizer_path_);
  }

  const Model& model() const { return model_; }
  // The model for a call that reads its weights: refused (sinkscope.Error naming the file) when
  // a file under its mapping changed on disk, which would otherwise end the interpreter with
  // SIGBUS or give numbers of a half-rewritten file.
  const Model& weights() const {
    CheckMappedFilesUnchanged();
    return model_;
  }
  const std::string& tokenizer_path() const { return tokenizer_path_; }

  const Tokenizer& tokenizer() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!tokenizer_) tokenizer_ = FindTokenizer(model_, tokenizer_path_);
    return *tokenizer_;
  }

  py::dict Config() const {
    const ModelConfig& c = model_.config;
    py::dict d;
    d["arch"] = c.arch;
    d["n_layers"] = c.n_layers;
    d["n_heads"] = c.n_heads;
    d["n_kv_heads"] = c.n_kv_heads;
    d["dim"] = c.dim;
    d["head_dim"] = c.head_dim;
    d["hidden_dim"] = c.hidden_dim;
    d["vocab_size"] = c.vocab_size;
    d["max_seq_len"] = c.max_seq_len;
    d["norm_eps"] = c.norm_eps;
    d["rope_theta"] = c.rope_theta;
    d["learned_positions"] = c.learned_pos;
    d["tied_embeddings"] = c.tied_embeddings;
    d["sliding_window"] = c.sliding_window;
    // The attention variant (the trainer's --set attention=..., gpt-oss's sinks): each variant's
    // flag (model/attention.h), and its name.
    for (const AttnVariant* v : AttnVariants())
      if (v->flag) d[v->flag_name] = c.*(v->flag);
    d["attention"] = ModelAttention(c).name;
    d["n_experts"] = c.n_experts;
    d["n_experts_per_tok"] = c.n_experts_per_tok;
    d["bos_id"] = c.bos_id;
    d["eos_id"] = c.eos_id;
    d["format"] = model_.format;
    d["path"] = model_.source;
    d["precision"] = PrecisionName(model_.precision);
    return d;
  }

 private:
  Model model_;
  std::string tokenizer_path_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::mutex mutex_;
};

// ---- Hooks.

// What a Python hook sees besides the activation (TransformerLens passes a HookPoint).
struct PyHookContext {
  std::string name;
  int layer = -1;
  int start = 0;
};

struct HookSpec {
  std::string name;
  py::object fn;
};

std::string TypeName(const py::handle& h) { return py::str(py::type::of(h).attr("__name__")); }

// A hook name from Python: a str, or a TypeError that says what was given instead.
std::string ToHookName(const py::handle& name, const char* what) {
  if (!py::isinstance<py::str>(name))
    throw py::type_error(
        fmt::format("{}: hook names must be strings, got {}", what, TypeName(name)));
  return name.cast<std::string>();
}

// run_with_cache's names: a sequence of hook names (a single str is refused, not read as letters).
std::vector<std::string> ToHookNames(const py::object& names, const char* what) {
  if (py::isinstance<py::str>(names) || !py::isinstance<py::sequence>(names))
    throw py::type_error(
        fmt::format("{}: expected a list of hook names, got {}", what, TypeName(names)));
  std::vector<std::string> out;
  for (const py::handle item : names) out.push_back(ToHookName(item, what));
  return out;
}

std::vector<HookSpec> ToHookSpecs(const py::object& hooks) {
  std::vector<HookSpec> out;
  if (hooks.is_none()) return out;
  if (py::isinstance<py::str>(hooks) || !py::isinstance<py::iterable>(hooks))
    throw py::type_error(
        fmt::format("hooks: expected a list of (name, function) pairs, got {}", TypeName(hooks)));
  for (const py::handle item : hooks) {
    if (!py::isinstance<py::tuple>(item) && !py::isinstance<py::list>(item))
      throw py::type_error(
          fmt::format("hooks: expected a list of (name, function) pairs, found an item of type {}",
                      TypeName(item)));
    auto pair = item.cast<py::sequence>();
    if (pair.size() != 2)
      throw Error(
          fmt::format("hooks: expected a list of (name, function) pairs, found an item "
                      "of {} elements",
                      pair.size()));
    HookSpec spec{ToHookName(pair[0], "hooks"), py::reinterpret_borrow<py::object>(pair[1])};
    if (!PyCallable_Check(spec.fn.ptr()))
      throw Error(fmt::format("hooks: the function for {} is not callable", spec.name));
    out.push_back(std::move(spec));
  }
  return out;
}

// Checks that a hook name is one of the model's (the layer inside the model).
void CheckHookName(const std::string& name, const ModelConfig& c) {
  HookPoint point;
  int layer;
  if (!Hooks::Parse(name, &point, &layer))
    throw Error(fmt::format(
        "'{}' is not a hook name (expected e.g. hook_embed, "
        "blocks.0.hook_resid_pre, blocks.0.attn.hook_pattern, ln_final.hook_normalized)",
        name));
  if (layer >= c.n_layers)
    throw Error(
        fmt::format("'{}': layer {} is outside the model ({} layers)", name, layer, c.n_layers));
}

// A shape as Python prints it: (4, 16, 16), (1,), ().
std::string PyShape(const py::ssize_t* dims, py::ssize_t ndim) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < ndim; ++i) s += fmt::format("{}{}", i ? ", " : "", dims[i]);
  return s + (ndim == 1 ? ",)" : ")");
}
std::string PyShape(const std::vector<int64_t>& shape) {
  const std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  return PyShape(dims.data(), static_cast<py::ssize_t>(dims.size()));
}

// Checks the array a hook left (`returned` false) or returned against the activation: the same
// shape, float32, C-contiguous where it is read in place. An array the hook resized in place
// (`a.resize(..., refcheck=False)`) or gave another shape, dtype or strides (`a.shape = ...`,
// `a.dtype = ...`) no longer holds the activation: reading numel() floats from it would read past
// its buffer or reinterpret its bytes. Raises ValueError naming the hook.
void CheckHookArray(const std::string& name, const py::array& a, const Tensor& activation,
                    bool returned) {
  const std::string expected = PyShape(activation.shape());
  const std::string shape = PyShape(a.shape(), a.ndim());
  const std::string dtype = py::str(a.dtype());
  const bool same_shape =
      std::vector<int64_t>(a.shape(), a.shape() + a.ndim()) == activation.shape();
  const bool float32 = a.dtype().is(py::dtype::of<float>());
  if (returned) {
    constexpr const char* kFix = "; return a float32 array of the activation's shape, or None";
    if (!same_shape)
      throw py::value_error(
          fmt::format("hook {}: the hook returned an array of shape {}; "
                      "expected {}{}",
                      name, shape, expected, kFix));
    if (!float32)
      throw py::value_error(
          fmt::format("hook {}: the hook returned an array of dtype {}; "
                      "expected float32{}",
                      name, dtype, kFix));
    return;
  }
  constexpr const char* kFix = "; modify it in place or return a new array of the same shape";
  if (!same_shape)
    throw py::value_error(
        fmt::format("hook {}: the hook changed the array's shape from {} to "
                    "{}{}",
                    name, expected, shape, kFix));
  if (!float32)
    throw py::value_error(
        fmt::format("hook {}: the hook changed the array's dtype from float32 "
                    "to {}{}",
                    name, dtype, kFix));
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(
        fmt::format("hook {}: the hook changed the array's strides (it is no "
                    "longer C-contiguous){}",
                    name, kFix));
}

// Wraps a Python function as an engine hook: it gets a numpy copy of the activation and a
// PyHookContext; it may change the array in place or return a float32 array of the same shape,
// which replaces the activation. Anything else (the array resized, reshaped or given another dtype
// in place; a returned array of another shape or dtype) raises ValueError naming the hook, the
// activation untouched. A Python exception stops the forward (PythonErrorPending).
HookFn WrapPythonHook(py::object fn) {
  return [fn](const HookContext& context, Tensor& activation) {
    py::gil_scoped_acquire gil;
    const std::string name = context.Name();
    try {
      FloatArray arr = ToNumpy(activation.data(), activation.shape());
      PyHookContext ctx{name, context.layer, context.start};
      py::object result = fn(arr, py::cast(ctx));
      // `arr` is read again through the numpy object: its shape, dtype, strides and data pointer
      // are what the hook left.
      py::array source = arr;
      if (!result.is_none()) {
        if (!py::isinstance<py::array>(result))
          throw py::type_error(fmt::format("hook {} returned {}; expected None or a numpy array",
                                           name, TypeName(result)));
        source = result.cast<py::array>();
      }
      CheckHookArray(name, source, activation, /*returned=*/!result.is_none());
      const FloatArray contiguous = FloatArray::ensure(source);  // C-contiguous copy if needed
      if (!contiguous) throw py::error_already_set();
      std::memcpy(activation.data(), contiguous.data(),
                  static_cast<size_t>(activation.numel()) * sizeof(float));
    } catch (py::error_already_set& e) {
      e.restore();
      throw PythonErrorPending{};
    } catch (const py::builtin_exception& e) {
      e.set_error();
      throw PythonErrorPending{};
    }
  };
}

struct ForwardResult {
  FloatArray logits;
  std::map<std::string, Tensor> cache;
};

// One forward over `ids` from an empty cache with the user's hooks, then caching hooks for `names`.
ForwardResult RunForward(PyModel& pm, const py::object& ids_obj, const std::vector<HookSpec>& user,
                         const std::vector<std::string>& names, bool allow_long_context) {
  const Model& model = pm.weights();
  const ModelConfig& c = model.config;
  const std::vector<int> ids = ToIds(ids_obj, c.vocab_size, "ids");
  if (ids.empty()) throw Error("ids: no tokens to run");
  const int T = static_cast<int>(ids.size());
  cli::CheckLength(c, T, allow_long_context, "allow_long_context=True", "ids");
  for (const auto& h : user) CheckHookName(h.name, c);
  for (const auto& n : names) CheckHookName(n, c);

  Hooks hooks;
  for (const auto& h : user) hooks.Add(h.name, WrapPythonHook(h.fn));
  ForwardResult result;
  for (const auto& n : names) {
    hooks.Add(n, [&result](const HookContext& context, Tensor& activation) {
      result.cache[context.Name()] = activation.Copy();
    });
  }
  Tensor logits;
  RunReleased([&] {
    KVCache cache = KVCache::CreateSingleUse(c, T);
    RunState state;
    ForwardRequest request;
    request.tokens = ids;
    request.logits = LogitsMode::kAll;
    request.hooks = hooks.empty() ? nullptr : &hooks;
    logits = Forward(model, cache, state, request).Copy();
    return 0;
  });
  result.logits = ToNumpy(logits.data(), logits.shape());
  return result;
}

// Every hook name of the model except the attention patterns (they are T^2 per head).
std::vector<std::string> DefaultCacheNames(const ModelConfig& c) {
  std::vector<std::string> names = {Hooks::Name(HookPoint::kEmbed, -1)};
  for (int l = 0; l < c.n_layers; ++l)
    for (int p = static_cast<int>(HookPoint::kResidPre);
         p <= static_cast<int>(HookPoint::kResidPost); ++p)
      if (static_cast<HookPoint>(p) != HookPoint::kPattern)
        names.push_back(Hooks::Name(static_cast<HookPoint>(p), l));
  names.push_back(Hooks::Name(HookPoint::kLnFinal, -1));
  return names;
}

std::vector<std::string> AllHookNames(const ModelConfig& c) {
  std::vector<std::string> names = {Hooks::Name(HookPoint::kEmbed, -1)};
  // A Gated DeltaNet layer has no q, k, v, pattern or z: its mixer's output and state instead.
  const HookPoint attention[] = {HookPoint::kQ, HookPoint::kK, HookPoint::kV, HookPoint::kPattern,
                                 HookPoint::kZ};
  for (int l = 0; l < c.n_layers; ++l)
    for (int p = static_cast<int>(HookPoint::kResidPre);
         p <= static_cast<int>(HookPoint::kResidPost); ++p) {
      const HookPoint point = static_cast<HookPoint>(p);
      const bool attn_only =
          std::find(std::begin(attention), std::end(attention), point) != std::end(attention);
      if (c.LinearLayer(l) && attn_only) continue;
      if (c.LinearLayer(l) && point == HookPoint::kAttnOut) {
        names.push_back(Hooks::Name(HookPoint::kLinearOut, l));
        names.push_back(Hooks::Name(HookPoint::kLinearState, l));
      }
      names.push_back(Hooks::Name(point, l));
      if (point == HookPoint::kZ && c.attn_output_gate)
        names.push_back(Hooks::Name(HookPoint::kAttnGate, l));
    }
  names.push_back(Hooks::Name(HookPoint::kLnFinal, -1));
  return names;
}

// ---- The sample stream of analyze and explain from Python input: None (the built-in default
// text, as the CLI without --text), a str (a text; with prompt=True, the CLI's --prompt), or ids.
cli::SampleStream StreamFromInput(PyModel& pm, const py::object& input, bool prompt) {
  const Model& model = pm.model();
  cli::SampleStream s;
  if (input.is_none()) {
    if (prompt) throw Error("prompt=True needs an input text or ids");
    return cli::ReadSampleStream(model, "", "", false, "", pm.tokenizer_path());
  }
  if (py::isinstance<py::str>(input)) {
    const std::string text = input.cast<std::string>();
    s.source = prompt ? "prompt" : "text";
    s.flag = prompt ? "--prompt" : "text";
    if (text.empty()) throw Error(fmt::format("{}: the text is empty", s.flag));
    s.tokens = pm.tokenizer().Encode(text, /*add_bos=*/false);
  } else {
    s.tokens = ToIds(input, model.config.vocab_size, "ids");
    s.source = "token ids";
    s.flag = "ids";
  }
  if (s.tokens.empty()) throw Error(fmt::format("{}: no tokens to analyse", s.flag));
  return s;
}

cli::SampleOptions MakeSampleOptions(int samples, int length, uint64_t seed, bool prompt) {
  cli::SampleOptions o;
  o.samples = samples;
  o.length = length;
  o.seed = seed;
  o.prompt_given = prompt;
  if (prompt) o.prompt = "given";  // the prompt's text is in the stream; only its presence counts
  return o;
}

// ---- Result objects: the report structure, numpy views of its arrays, and the CLI's JSON.

py::dict ConditionDict(const analysis::ConditionResult& r) {
  const py::ssize_t K = r.first_k, L = r.n_layers, H = r.n_heads;
  py::dict d;
  d["condition"] = analysis::ConditionName(r.condition);
  d["samples"] = r.samples;
  d["length"] = r.length;
  d["alpha"] = VectorToNumpy(r.alpha, {K, L, H});
  d["sink_rate"] = VectorToNumpy(r.sink_rate, {K});
  d["sink_rate_per_layer"] = VectorToNumpy(r.sink_rate_per_layer, {K, L});
  d["sink_rate_from_layer"] = VectorToNumpy(r.sink_rate_from_layer, {K, L});
  d["sink_rate_of_mean_alpha"] = VectorToNumpy(r.sink_rate_of_mean_alpha, {K});
  d["sink_rate_of_mean_alpha_per_layer"] =
      VectorToNumpy(r.sink_rate_of_mean_alpha_per_layer, {K, L});
  d["top_share"] = VectorToNumpy(r.top_share, {L, H});
  d["top_mode"] = VectorToNumpy(r.top_mode, {L, H});
  d["top_mode_rate"] = VectorToNumpy(r.top_mode_rate, {L, H});
  d["top_p0_rate"] = VectorToNumpy(r.top_p0_rate, {L, H});
  d["p0_norm_ratio"] = VectorToNumpy(r.p0_norm_ratio, {L});
  d["p1_norm_ratio"] = VectorToNumpy(r.p1_norm_ratio, {L});
  d["max_other_norm_ratio"] = VectorToNumpy(r.max_other_norm_ratio, {L});
  d["median_abs"] = VectorToNumpy(r.median_abs, {L});
  d["massive_count"] = VectorToNumpy(r.massive_count, {L});
  d["p0_cosine"] = VectorToNumpy(r.p0_cosine, {L});
  d["other_cosine"] = VectorToNumpy(r.other_cosine, {L});
  py::dict patterns;
  for (const auto& p : r.patterns)
    patterns[py::make_tuple(p.head.layer, p.head.head)] =
        VectorToNumpy(p.mean, {static_cast<py::ssize_t>(p.T), static_cast<py::ssize_t>(p.T)});
  d["patterns"] = patterns;
  d["layer_window"] = VectorToNumpy(r.layer_window, {L});
  d["sink_rate_global_layers"] = r.sink_rate_global;
  d["sink_rate_sliding_layers"] = r.sink_rate_sliding;  // NaN when no layer slides
  // A sink slot (gpt-oss sink logits, trainer attention=sink-logit or kv-bias): the mass on it.
  if (r.has_sink_slot) {
    d["alpha_sink"] = VectorToNumpy(r.alpha_sink, {L, H});
    d["sink_slot_rate"] = r.sink_slot_rate;
    d["sink_slot_rate_per_layer"] = VectorToNumpy(r.sink_slot_rate_per_layer, {L});
  }
  // Sigmoid attention: the weights themselves beside the proxy alpha (weight on position 0, row
  // total).
  if (r.has_sigmoid_weights) {
    d["alpha0_raw"] = VectorToNumpy(r.alpha0_raw, {L, H});
    d["row_sum"] = VectorToNumpy(r.row_sum, {L, H});
  }
  // Gated attention (trainer attention=gated): the output gate's mean at position 0 / elsewhere.
  if (r.has_output_gate) {
    d["gate_p0"] = VectorToNumpy(r.gate_p0, {L});
    d["gate_rest"] = VectorToNumpy(r.gate_rest, {L});
  }
  return d;
}

struct AnalyzeResult {
  analysis::AnalyzeReport report;
};
struct ExplainResultBox {
  explain::ExplainReport report;
};
struct TraceResult {
  cli::TraceRun run;
};
struct StreamResult {
  cli::StreamDocument doc;
  std::vector<cli::StreamRun> runs;
};

std::string Dump(const nlohmann::json& j) { return report::JsonText(j); }

}  // namespace
}  // namespace ss::python

namespace ss::python {
namespace {

// Errors (ss::Error as sinkscope.Error, out of memory as MemoryError), threads and the BLAS in use.
void BindEngine(py::module_& m) {
  static py::exception<Error> error(m, "Error", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      error(e.what());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "out of memory");
    }
  });

  m.def(
      "set_threads", [](int64_t n) { SetThreadCountChecked("threads", n); }, py::arg("n"),
      "Threads for the whole process: 1 to 4096 as the CLI's --threads, and at most what the "
      "OpenBLAS in use runs (default: the cores available).");
  m.def(
      "threads", [] { return ThreadCount(); }, "Threads the engine uses.");
  m.def(
      "blas_info",
      [] {
        const BlasInfo b = GetBlasInfo();
        py::dict d;
        d["config"] = b.config;
        d["core"] = b.core;
        d["library"] = b.library;
        d["openmp"] = b.openmp();
        d["bf16_kernel"] = std::string(Bf16KernelName());
        d["q8_0_kernel"] = std::string(Q8KernelName());
        d["native_kernel"] = std::string(GgmlKernelName(kGgmlTypeQ4_K));
        return d;
      },
      "The OpenBLAS the engine calls (config, core, library path, whether it is the OpenMP build) "
      "and the bf16 kernel in use.");
}

// HookPoint and Model: loading, tokens, forward, hooks and the activation cache.
void BindModel(py::module_& m) {
  py::class_<PyHookContext>(m, "HookPoint",
                            "Where a hook runs: its name, layer (-1 for hook_embed "
                            "and ln_final) and the position of the call's first token.")
      .def_readonly("name", &PyHookContext::name)
      .def_readonly("layer", &PyHookContext::layer)
      .def_readonly("start", &PyHookContext::start)
      .def("__repr__", [](const PyHookContext& c) { return "<HookPoint " + c.name + ">"; });

  py::class_<PyModel>(m, "Model",
                      "A loaded model (llama2.c .bin, GGUF, or a Hugging Face directory).")
      .def(py::init<const std::string&, const std::string&, const std::string&>(), py::arg("path"),
           py::arg("tokenizer") = "", py::arg("precision") = "")
      .def_property_readonly("config", &PyModel::Config)
      .def_property_readonly("path", [](const PyModel& p) { return p.model().source; })
      .def_property_readonly("n_layers", [](const PyModel& p) { return p.model().config.n_layers; })
      .def_property_readonly("n_heads", [](const PyModel& p) { return p.model().config.n_heads; })
      .def(
          "hook_names", [](const PyModel& p) { return AllHookNames(p.model().config); },
          "Every hook name of this model, in forward order.")
      .def(
          "tokenize",
          [](PyModel& p, const std::string& text, bool bos) {
            const Tokenizer& t = p.tokenizer();
            std::vector<int> ids = t.Encode(text, bos && t.bos_id() >= 0);
            return VectorToNumpy(std::vector<int64_t>(ids.begin(), ids.end()),
                                 {static_cast<py::ssize_t>(ids.size())});
          },
          py::arg("text"), py::arg("bos") = true)
      .def(
          "detokenize",
          [](PyModel& p, const py::object& ids) {
            const std::vector<int> v = ToIds(ids, p.model().config.vocab_size, "ids");
            return py::bytes(p.tokenizer().Decode(v)).attr("decode")("utf-8", "replace");
          },
          py::arg("ids"))
      .def(
          "forward",
          [](PyModel& p, const py::object& ids, const py::object& hooks, bool allow_long) {
            return RunForward(p, ids, ToHookSpecs(hooks), {}, allow_long).logits;
          },
          py::arg("ids"), py::arg("hooks") = py::none(), py::arg("allow_long_context") = false)
      .def(
          "run_with_cache",
          [](PyModel& p, const py::object& ids, const py::object& names_obj,
             const py::object& hooks, bool allow_long) {
            std::vector<std::string> names = names_obj.is_none()
                                                 ? DefaultCacheNames(p.model().config)
                                                 : ToHookNames(names_obj, "names");
            ForwardResult r = RunForward(p, ids, ToHookSpecs(hooks), names, allow_long);
            py::dict cache;
            for (const auto& n : names) {
              const auto it = r.cache.find(n);
              if (it == r.cache.end())
                throw Error(fmt::format(
                    "names: '{}' was not recorded: this model's forward has no such activation "
                    "(hook_names() lists the points of every model; some exist only in some "
                    "architectures)",
                    n));
              const Tensor& t = it->second;
              cache[py::str(n)] = ToNumpy(t.data(), t.shape());
            }
            return py::make_tuple(r.logits, cache);
          },
          py::arg("ids"), py::arg("names") = py::none(), py::arg("hooks") = py::none(),
          py::arg("allow_long_context") = false);
}

// analyze(): cli::RunAnalysis on the model, and its result.
void BindAnalyze(py::module_& m) {
  py::class_<AnalyzeResult>(m, "AnalyzeResult")
      .def_property_readonly("conditions",
                             [](const AnalyzeResult& r) {
                               py::dict d;
                               for (const auto& c : r.report.conditions)
                                 d[py::str(analysis::ConditionName(c.condition))] =
                                     ConditionDict(c);
                               return d;
                             })
      .def_property_readonly("length",
                             [](const AnalyzeResult& r) { return r.report.settings.length; })
      .def_property_readonly("samples",
                             [](const AnalyzeResult& r) { return r.report.settings.samples; })
      .def("to_json", [](const AnalyzeResult& r) { return Dump(analysis::ReportJson(r.report)); })
      .def("summary", [](const AnalyzeResult& r) { return analysis::ReportSummary(r.report); })
      .def("html", [](const AnalyzeResult& r) { return analysis::ReportHtml(r.report); });

  m.def(
      "analyze",
      [](PyModel& p, const py::object& input, const std::string& conditions, int samples,
         int length, uint64_t seed, int first_k, double eps, const std::string& patterns,
         const std::string& attention, bool prompt, bool allow_long_context) {
        cli::AnalyzeRequest req;
        req.input = MakeSampleOptions(samples, length, seed, prompt);
        req.conditions = analysis::ParseConditions(conditions, "conditions");
        req.sink.eps = eps;
        req.sink.first_k = first_k;
        req.patterns = patterns;
        req.attn_path = attention;
        req.allow_long_context = allow_long_context;
        req.allow_long_name = "allow_long_context=True";
        cli::ValidateAnalyze(req);
        const cli::SampleStream stream = StreamFromInput(p, input, prompt);
        auto out = std::make_unique<AnalyzeResult>();
        out->report = RunReleased([&] { return cli::RunAnalysis(p.weights(), stream, req); });
        return out;
      },
      py::arg("model"), py::arg("input"), py::arg("conditions"), py::arg("samples"),
      py::arg("length"), py::arg("seed"), py::arg("first_k"), py::arg("eps"), py::arg("patterns"),
      py::arg("attention"), py::arg("prompt"), py::arg("allow_long_context"));
}

// explain(): cli::RunExplanation, and its result.
void BindExplain(py::module_& m) {
  py::class_<ExplainResultBox>(m, "ExplainResult")
      .def_property_readonly("verdict",
                             [](const ExplainResultBox& r) { return r.report.result.verdict; })
      .def_property_readonly("onset_layer",
                             [](const ExplainResultBox& r) { return r.report.result.onset_layer; })
      .def_property_readonly(
          "amplification_layer",
          [](const ExplainResultBox& r) { return r.report.result.amplification_layer; })
      .def_property_readonly("p0_norm_ratio",
                             [](const ExplainResultBox& r) {
                               std::vector<double> v;
                               for (const auto& l : r.report.result.layers)
                                 v.push_back(l.p0_norm_ratio);
                               return VectorToNumpy(v, {static_cast<py::ssize_t>(v.size())});
                             })
      .def_property_readonly("sink_rate_per_layer",
                             [](const ExplainResultBox& r) {
                               std::vector<double> v;
                               for (const auto& l : r.report.result.layers)
                                 v.push_back(l.sink_rate);
                               return VectorToNumpy(v, {static_cast<py::ssize_t>(v.size())});
                             })
      .def("to_json", [](const ExplainResultBox& r) { return Dump(explain::ReportJson(r.report)); })
      .def("summary", [](const ExplainResultBox& r) { return explain::ReportSummary(r.report); })
      .def("html", [](const ExplainResultBox& r) { return explain::ReportHtml(r.report); });

  m.def(
      "explain",
      [](PyModel& p, const py::object& input, const std::string& condition, int samples, int length,
         uint64_t seed, double eps, double onset_threshold, double amplification_threshold,
         double share, int intervention_samples, int max_components, const std::string& ablation,
         const std::string& ablate, bool prompt, int verify_top, bool exhaustive,
         int estimate_samples, double confidence, bool early_stop) {
        cli::SinkOptions sink;
        sink.eps = eps;
        sink.Validate();
        cli::LayerThresholdOptions layers{onset_threshold, amplification_threshold};
        layers.Validate();
        cli::ExplainRequest req;
        req.input = MakeSampleOptions(samples, length, seed, prompt);
        const auto conds = analysis::ParseConditions(condition, "condition");
        if (conds.size() != 1) throw Error("condition: expected exactly one condition");
        req.condition = conds[0];
        req.options.eps = eps;
        req.options.onset_threshold = onset_threshold;
        req.options.amplification_threshold = amplification_threshold;
        req.options.share = share;
        req.options.intervention_samples = intervention_samples;
        req.options.max_components = max_components;
        req.options.verify_top = verify_top;
        req.options.exhaustive = exhaustive;
        req.options.estimate_samples = estimate_samples;
        req.options.confidence = confidence;
        req.options.early_stop = early_stop;
        req.ablation = ablation;
        req.ablate = ablate;
        cli::ValidateExplain(req);
        const cli::SampleStream stream = StreamFromInput(p, input, prompt);
        auto out = std::make_unique<ExplainResultBox>();
        out->report = RunReleased([&] { return cli::RunExplanation(p.weights(), stream, req); });
        return out;
      },
      py::arg("model"), py::arg("input"), py::arg("condition"), py::arg("samples"),
      py::arg("length"), py::arg("seed"), py::arg("eps"), py::arg("onset_threshold"),
      py::arg("amplification_threshold"), py::arg("share"), py::arg("intervention_samples"),
      py::arg("max_components"), py::arg("ablation"), py::arg("ablate"), py::arg("prompt"),
      py::arg("verify_top"), py::arg("exhaustive"), py::arg("estimate_samples"),
      py::arg("confidence"), py::arg("early_stop"));
}

// trace(): cli::RunTraceAnalysis over checkpoints, and its result.
void BindTrace(py::module_& m) {
  py::class_<TraceResult>(m, "TraceResult")
      .def_property_readonly("steps",
                             [](const TraceResult& r) {
                               std::vector<int64_t> v;
                               for (const auto& c : r.run.results) v.push_back(c.ref.step);
                               return VectorToNumpy(v, {static_cast<py::ssize_t>(v.size())});
                             })
      .def_property_readonly("stages",
                             [](const TraceResult& r) {
                               std::vector<std::string> v;
                               for (const auto& c : r.run.results)
                                 v.push_back(c.ok ? trace::StageName(c.stage) : "failed");
                               return v;
                             })
      .def_property_readonly("errors",
                             [](const TraceResult& r) {
                               std::vector<std::string> v;
                               for (const auto& c : r.run.results) v.push_back(c.error);
                               return v;
                             })
      .def("to_json",
           [](const TraceResult& r) {
             return Dump(trace::TraceJson(r.run.results, r.run.settings));
           })
      .def("table",
           [](const TraceResult& r) {
             return trace::TraceTable(r.run.results, r.run.settings.stage);
           })
      .def("html",
           [](const TraceResult& r) { return trace::TraceHtml(r.run.results, r.run.settings); });

  m.def(
      "trace",
      [](const std::vector<std::string>& checkpoints, int samples, int length, uint64_t seed,
         const std::string& text_file, const std::string& tokenizer, double eps,
         double onset_threshold, double amplification_threshold, int early_blocks,
         double other_share, int stable_window, bool no_cache, const std::string& precision) {
        cli::TraceRequest req;
        req.checkpoints = checkpoints;
        req.input = MakeSampleOptions(samples, length, seed, false);
        req.input.text_file = text_file;
        req.input.tokenizer = tokenizer;
        req.sink.eps = eps;
        req.layers = {onset_threshold, amplification_threshold};
        req.early_blocks = early_blocks;
        req.other_share = other_share;
        req.stable_window = stable_window;
        req.no_cache = no_cache;
        req.precision = precision;
        cli::ValidateTrace(req);
        auto out = std::make_unique<TraceResult>();
        // One line per checkpoint goes to stderr (as the CLI logs it) and is a point to stop at.
        out->run = RunReleased([&] {
          return cli::RunTraceAnalysis(req, 0, 1, [](const std::string& line) {
            report::PollProgress();
            cli::Log(line);
          });
        });
        return out;
      },
      py::arg("checkpoints"), py::arg("samples"), py::arg("length"), py::arg("seed"),
      py::arg("text_file"), py::arg("tokenizer"), py::arg("eps"), py::arg("onset_threshold"),
      py::arg("amplification_threshold"), py::arg("early_blocks"), py::arg("other_share"),
      py::arg("stable_window"), py::arg("no_cache"), py::arg("precision"));
}

// stream(): cli::RunStreamPolicy per policy, and its result.
void BindStream(py::module_& m) {
  py::class_<StreamResult>(m, "StreamResult")
      .def_property_readonly("runs",
                             [](const StreamResult& r) {
                               py::list out;
                               for (const auto& run : r.runs) {
                                 py::dict d;
                                 d["policy"] = stream::PolicyName(run.policy);
                                 d["sinks"] = run.sinks;
                                 d["window"] = run.window;
                                 d["cache_entries"] = run.budget;
                                 d["mean_nll"] = run.MeanNll();
                                 d["perplexity"] = std::exp(run.MeanNll());
                                 d["nll"] = VectorToNumpy(
                                     run.nll, {static_cast<py::ssize_t>(run.nll.size())});
                                 d["peak_kv_cache_bytes"] = run.peak_kv_bytes;
                                 d["kv_type_k"] = KvTypeName(run.k_type);
                                 d["kv_type_v"] = KvTypeName(run.v_type);
                                 d["kv_keep"] = run.keep;
                                 d["kv_bytes_per_token"] = run.kv_bytes_per_token;
                                 d["seconds"] = run.seconds;
                                 out.append(d);
                               }
                               return out;
                             })
      .def("to_json", [](const StreamResult& r) { return Dump(cli::StreamJson(r.doc, r.runs)); });

  m.def(
      "stream",
      [](PyModel& p, const py::object& input, const std::vector<std::string>& policies, int sinks,
         int window, bool force, int64_t max_tokens, bool bos, const std::string& kv_type,
         const std::string& kv_type_k, const std::string& kv_type_v, const std::string& kv_keep) {
        const Model& model = p.weights();
        if (max_tokens < 0)
          throw Error(fmt::format("max_tokens: expected 0 (all) or more, got {}", max_tokens));
        if (policies.empty()) throw Error("policy: expected at least one policy");
        std::vector<stream::StreamOptions> options;
        for (const auto& name : policies) {
          stream::StreamOptions o;
          o.policy = stream::ParsePolicy(name, "policy");
          o.sinks = sinks;
          o.window = window;
          o.force = force;
          stream::ValidateOptions(o, model.config);
          options.push_back(o);
        }
        auto out = std::make_unique<StreamResult>();
        std::vector<int> tokens;
        if (py::isinstance<py::str>(input)) {
          const Tokenizer& t = p.tokenizer();
          tokens = t.Encode(input.cast<std::string>(), bos && t.bos_id() >= 0);
          out->doc.text = "text";
        } else {
          tokens = ToIds(input, model.config.vocab_size, "ids");
          out->doc.text = "token ids";
        }
        if (max_tokens > 0 && static_cast<int64_t>(tokens.size()) > max_tokens)
          tokens.resize(max_tokens);
        if (tokens.size() < 2)
          throw Error(
              fmt::format("{}: {} token(s); expected at least two (one to condition on, one "
                          "to score)",
                          out->doc.text, tokens.size()));
        for (const auto& o : options)
          if (o.policy == stream::Policy::kDense && !force &&
              static_cast<int64_t>(tokens.size()) > model.config.max_seq_len)
            throw Error(
                fmt::format("policy dense: the input has {} tokens, more than the model's "
                            "context of {}; use max_tokens, a streaming policy, or force=True",
                            tokens.size(), model.config.max_seq_len));
        // The cache's storage, as the CLI's --kv-type / --kv-keep (docs/STREAMING.md).
        cli::KvCacheFlags kv;
        kv.type = kv_type, kv.type_k = kv_type_k, kv.type_v = kv_type_v, kv.keep = kv_keep;
        for (auto& o : options) kv.Apply(model, tokens, &o);
        out->doc.model = model.source;
        out->doc.tokens = static_cast<int64_t>(tokens.size());
        out->doc.bos = bos;
        out->doc.sinks = sinks;
        out->doc.window = window;
        out->doc.force = force;
        out->doc.precision = PrecisionName(model.precision);
        out->doc.max_tokens = max_tokens;
        RunReleased([&] {
          for (const auto& o : options)
            out->runs.push_back(
                cli::RunStreamPolicy(model, o, tokens, nullptr, false, /*keep_nll=*/true));
          return 0;
        });
        return out;
      },
      py::arg("model"), py::arg("input"), py::arg("policies"), py::arg("sinks"), py::arg("window"),
      py::arg("force"), py::arg("max_tokens"), py::arg("bos"), py::arg("kv_type"),
      py::arg("kv_type_k"), py::arg("kv_type_v"), py::arg("kv_keep"));
}

}  // namespace
}  // namespace ss::python

using namespace ss;
using namespace ss::python;

// The module in phases, one function each (above).
PYBIND11_MODULE(_sinkscope, m) {
  m.doc() =
      "sinkscope engine (C++): models, hooks and the analyze / explain / trace / stream verbs";
  // An interpreter outlives one bad call: a broken invariant raises RuntimeError, not abort().
  ss::SetAssertionsThrow(true);
  BindEngine(m);
  BindModel(m);
  BindAnalyze(m);
  BindExplain(m);
  BindTrace(m);
  BindStream(m);
}
