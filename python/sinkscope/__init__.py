"""sinkscope: attention sinks in transformer language models, from Python.

The engine is the same C++ code as the ``sinkscope`` command line (the extension module
``sinkscope._sinkscope``); arrays come back as numpy arrays and every result's ``to_json()`` is the
JSON document the matching CLI verb writes.

    import sinkscope
    m = sinkscope.load("models/stories260K/stories260K.bin")
    ids = m.tokenize("Once upon a time, there was a little girl named Lily.")
    logits, cache = m.run_with_cache(ids, names=["blocks.0.attn.hook_pattern"])
    r = sinkscope.analyze(m, conditions="bos,no-bos", samples=16, length=64)
    print(r.conditions["bos"]["alpha"].shape)   # (K, L, H)

Long calls (analyze, explain, trace, stream, forward) release the GIL; analyze, explain, trace and
stream stop with KeyboardInterrupt on Ctrl-C at their next sample, forward pass, checkpoint or 64
tokens. Engine errors raise ``sinkscope.Error`` (a ValueError) with the engine's message; a missing
path raises FileNotFoundError.
"""

from __future__ import annotations

import os

# libgomp reads its wait policy once, when it is loaded: threads that spin briefly between parallel
# regions, then sleep (what the CLI sets too; see docs/DESIGN.md "Threads"). Only if the user chose
# nothing and no other module has loaded libgomp yet.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")


def _blas_core_override(path):
    """The OPENBLAS_CORETYPE to load OpenBLAS with where it does not know this CPU (the CLI's rule,
    kernels/parallel.h BlasCoreOverride): when OpenBLAS, loaded in a throwaway process, reports
    its SSE3 fallback "Prescott", the kernel set the CPU can run. None otherwise."""
    import subprocess
    import sys

    probe = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); "
             "lib.openblas_get_corename.restype = ctypes.c_char_p; "
             "print(lib.openblas_get_corename().decode())")
    try:
        core = subprocess.run([sys.executable, "-c", probe, path], capture_output=True, text=True,
                              timeout=30).stdout.strip()
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except (OSError, subprocess.SubprocessError):
        return None
    if core != "Prescott":
        return None
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= set(flags):
        return "SkylakeX"
    if {"avx2", "fma"} <= set(flags):
        return "Haswell"
    return None


def _load_openmp_openblas():
    """Loads OpenBLAS's OpenMP build by its path into the global symbol scope, before the extension.

    numpy, usually imported first, loads Debian's default libopenblas.so.0 (the alternatives
    often keep the pthread build); the extension's dependency on that same name would then be met
    by it: OpenBLAS threads fighting OpenMP's (docs/DESIGN.md "Threads") and sums in another order
    than the CLI's. A copy loaded by path with RTLD_GLOBAL comes first when the extension's BLAS
    symbols are resolved (the CMake build links this same file; CMakeLists.txt). numpy keeps its
    own. blas_info() tells which one the extension uses."""
    import ctypes
    import glob

    for path in sorted(glob.glob("/usr/lib/*/openblas-openmp/libopenblas.so.0")) + [
            "/usr/lib64/openblas-openmp/libopenblas.so.0", "/usr/lib/openblas-openmp/libopenblas.so.0"]:
        if os.path.exists(path):
            if "OPENBLAS_CORETYPE" not in os.environ:
                core = _blas_core_override(path)
                if core:
                    os.environ["OPENBLAS_CORETYPE"] = core
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return
            except OSError:
                pass


_load_openmp_openblas()

from . import _sinkscope  # noqa: E402
from ._sinkscope import (  # noqa: E402,F401
    AnalyzeResult,
    Error,
    ExplainResult,
    HookPoint,
    Model,
    StreamResult,
    TraceResult,
    blas_info,
    set_threads,
    threads,
)

__all__ = [
    "load", "analyze", "explain", "trace", "stream", "set_threads", "threads", "blas_info", "Model", "HookPoint",
    "AnalyzeResult", "ExplainResult", "TraceResult", "StreamResult", "Error",
]
__version__ = "0.1.0"


def _data(self):
    """The result as a Python dict: the parsed to_json() document (the CLI's schema)."""
    import json
    return json.loads(self.to_json())


for _cls in (AnalyzeResult, ExplainResult, TraceResult, StreamResult):
    _cls.data = property(_data, doc=_data.__doc__)


def _require_path(path, what):
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what}: expected a path, got {type(path).__name__}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(2, f"{what}: no such file or directory", path)
    return path


def load(path, tokenizer=None, precision=None):
    """Loads a model: a llama2.c ``.bin``, a GGUF file, or a Hugging Face directory (config.json +
    safetensors). ``tokenizer`` overrides the tokenizer found beside the model (it is read and
    checked against the model here: a file that is no tokenizer raises at once); ``precision`` is
    "f32" (the reference), "bf16" (weights held in bf16; bf16 operands, f32 sums), "q8_0" (weights
    held as Q8_0 blocks; f32 activations) or "native" (each projection kept in the type the file
    stores: F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, MXFP4, mapped from the file; f32 activations). None
    (the default): the file's own, as the CLI's: "native", or "f32" for a file that stores every
    weight as F32 (llama2.c files, trainer checkpoints); ``config["precision"]`` says which."""
    path = _require_path(path, "model")
    tok = _require_path(tokenizer, "tokenizer") if tokenizer is not None else ""
    return Model(path, tok, precision or "")


def _input(input):
    """A list of texts becomes one text (joined by blank lines): the stream samples are cut from."""
    if isinstance(input, (list, tuple)) and input and all(isinstance(t, str) for t in input):
        return "\n\n".join(input)
    return input


def _conditions(conditions):
    if isinstance(conditions, str):
        return conditions
    return ",".join(conditions)


def analyze(model, input=None, *, conditions="bos,no-bos,random-p0,repeat", samples=64, length=64,
            seed=0, first_k=4, eps=0.3, patterns="", attention="fused", prompt=False,
            allow_long_context=False):
    """Measures the model's attention sinks (``sinkscope analyze``).

    ``input``: None (the built-in default text), a text (str), a list of texts (joined by blank
    lines) or token ids (without BOS: each condition decides position 0). Samples of ``length`` tokens are cut at random offsets drawn from
    ``seed``; with ``prompt=True`` the whole input is one sample. ``conditions``: a list or a
    comma-separated string of bos, no-bos, random-p0, repeat. ``patterns``: heads whose mean (T, T)
    pattern to keep, e.g. "0:3,1:*".

    Returns an AnalyzeResult: ``conditions[name]`` is a dict of numpy arrays (``alpha`` (K, L, H),
    ``sink_rate`` (K), ``sink_rate_per_layer`` (K, L), ``p0_norm_ratio`` (L), ``layer_window`` (L), ...;
    with learned sink logits (gpt-oss) also ``alpha_sink`` (L, H) and ``sink_slot_rate``; with an
    output gate ``gate_p0`` and ``gate_rest`` (L)); ``to_json()`` is
    the CLI's --json document."""
    return _sinkscope.analyze(model, _input(input), _conditions(conditions), samples, length, seed, first_k,
                              eps, patterns, attention, prompt, allow_long_context)


def explain(model, input=None, *, condition="bos", samples=16, length=64, seed=0, eps=0.3,
            onset_threshold=0.5, amplification_threshold=3.0, share=0.8, intervention_samples=8,
            max_components=6, ablation="mean", ablate="", prompt=False, verify_top=None,
            exhaustive=False, estimate_samples=2, confidence=0.95, early_stop=True):
    """Locates the P0 sink circuit with interventions at position 0 and fits the cone model
    (``sinkscope explain``). ``ablate``: also measure knocking out this set at P0, e.g.
    "mlp.1,head.0.3" (``ablation`` "mean" or "zero"). Rows are estimated and the best
    ``verify_top`` measured (16 when not given; ``exhaustive``: all, and then ``verify_top`` is not
    taken, as the CLI refuses --verify-top with --exhaustive); intervention samples stop once the verdict and
    circuit are settled at ``confidence`` (``early_stop=False``: all of them; the CLI's
    --no-early-stop). Returns an ExplainResult (``verdict``, ``p0_norm_ratio``,
    ``sink_rate_per_layer``, ``to_json()``)."""
    if exhaustive and verify_top is not None:
        raise Error("verify_top: cannot be combined with exhaustive=True, which measures every row")
    if verify_top is None:
        verify_top = 16
    return _sinkscope.explain(model, _input(input), condition, samples, length, seed, eps, onset_threshold,
                              amplification_threshold, share, intervention_samples, max_components,
                              ablation, ablate, prompt, verify_top, exhaustive, estimate_samples,
                              confidence, early_stop)


def trace(checkpoints, *, samples=16, length=64, seed=0, text_file=None, tokenizer=None, eps=0.3,
          onset_threshold=0.5, amplification_threshold=3.0, early_blocks=1, other_share=0.1,
          stable_window=3, no_cache=False, precision=None):
    """Sink profile and formation stage of every checkpoint of a run (``sinkscope trace``).
    ``checkpoints``: a run directory, or a list of checkpoint directories / GGUF files. Returns a
    TraceResult (``steps``, ``stages``, ``table()``, ``to_json()``). ``precision``: as ``load``'s
    (None: the checkpoints' own)."""
    if isinstance(checkpoints, (str, os.PathLike)):
        checkpoints = [checkpoints]
    paths = [_require_path(c, "checkpoints") for c in checkpoints]
    text = _require_path(text_file, "text_file") if text_file is not None else ""
    tok = _require_path(tokenizer, "tokenizer") if tokenizer is not None else ""
    return _sinkscope.trace(paths, samples, length, seed, text, tok, eps, onset_threshold,
                            amplification_threshold, early_blocks, other_share, stable_window,
                            no_cache, precision or "")


def stream(model, input, *, policy="sinks", sinks=4, window=252, force=False, max_tokens=0,
           bos=True, kv_type="f32", kv_type_k="", kv_type_v="", kv_keep="none"):
    """Streaming perplexity through a bounded KV cache (``sinkscope stream``). ``input``: a text (str,
    BOS first when ``bos``) or token ids. ``policy``: dense, window, sinks, recompute, or a list of
    them (the CLI's --compare). ``kv_type`` (f32, bf16, f16, q8_0, q4_0; ``kv_type_k`` /
    ``kv_type_v`` for keys / values apart) and ``kv_keep`` (none, first:N, detected) choose the cache's
    storage, as --kv-type and --kv-keep. Returns a StreamResult whose ``runs`` hold the per-token NLL
    as a numpy vector (``runs[i]["nll"]``, position 1 onwards) and ``to_json()``."""
    policies = [policy] if isinstance(policy, str) else list(policy)
    return _sinkscope.stream(model, input, policies, sinks, window, force, max_tokens, bos,
                             kv_type, kv_type_k, kv_type_v, kv_keep)
