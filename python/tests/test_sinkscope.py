"""The Python module against the numpy reference values and against the CLI's JSON, on the real
stories260K model; bad input raises Python exceptions and leaves the model usable."""

import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import MODEL, REPO, load_json, run_cli

REFERENCES = sorted((REPO / "tests" / "data" / "reference").glob("*.json"))
TEXT = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."


def without(doc, *paths):
    """A copy of a JSON document without the given keys ("a.b" for nested keys)."""
    doc = json.loads(json.dumps(doc))
    for path in paths:
        *parents, last = path.split(".")
        node = doc
        for p in parents:
            node = node[p]
        node.pop(last, None)
    return doc


# ---- The engine against the independent float64 reference (tests/data/reference, numpy).

@pytest.mark.parametrize("ref_path", REFERENCES, ids=lambda p: p.stem)
def test_run_with_cache_matches_numpy_reference(model, ref_path):
    ref = load_json(ref_path)
    ids = np.array(ref["tokens"])
    L = model.n_layers
    names = [f"blocks.{l}.hook_resid_post" for l in range(L)] + \
            [f"blocks.{l}.attn.hook_pattern" for l in range(L)]
    logits, cache = model.run_with_cache(ids, names=names)
    assert sorted(cache) == sorted(names)
    worst = {}
    # Logits reach about 20 here: compared relative to the largest (f32 holds 7 digits); the
    # activations asked for, absolutely.
    ref_logits = np.array(ref["logits"])
    worst["logits (relative)"] = np.abs(logits - ref_logits).max() / np.abs(ref_logits).max()
    for l in range(L):
        hidden = np.array(ref["hidden_after_block"][l])
        pattern = np.array(ref["attn"][l])
        assert cache[f"blocks.{l}.hook_resid_post"].shape == hidden.shape
        assert cache[f"blocks.{l}.attn.hook_pattern"].shape == pattern.shape
        worst[f"resid_post.{l}"] = np.abs(cache[f"blocks.{l}.hook_resid_post"] - hidden).max()
        worst[f"pattern.{l}"] = np.abs(cache[f"blocks.{l}.attn.hook_pattern"] - pattern).max()
    print(f"{ref_path.stem}: largest difference {max(worst.values()):.3g} ({max(worst, key=worst.get)})")
    for name, diff in worst.items():
        assert diff < 1e-5, f"{name}: {diff}"
    # forward() gives the same logits as run_with_cache (without the pattern hooks: fused attention).
    assert np.abs(model.forward(ids) - logits).max() / np.abs(ref_logits).max() < 1e-5


def test_tokenize_matches_reference_tokens(model):
    for ref_path in REFERENCES:
        ref = load_json(ref_path)
        assert model.tokenize(ref["text"], bos=ref["bos"]).tolist() == ref["tokens"]
        assert model.detokenize(ref["tokens"][1 if ref["bos"] else 0:]).strip() == ref["text"]


def test_default_cache_names_exclude_patterns(model):
    ids = model.tokenize(TEXT)
    _, cache = model.run_with_cache(ids)
    assert "hook_embed" in cache and "ln_final.hook_normalized" in cache
    assert not any(name.endswith("hook_pattern") for name in cache)
    assert cache["blocks.0.attn.hook_q"].shape == (len(ids), model.n_heads, model.config["head_dim"])
    # The residual stream adds up: resid_post = resid_mid + mlp_out, resid_mid = resid_pre + attn_out.
    for l in range(model.n_layers):
        np.testing.assert_allclose(cache[f"blocks.{l}.hook_resid_post"],
                                   cache[f"blocks.{l}.hook_resid_mid"] + cache[f"blocks.{l}.hook_mlp_out"],
                                   atol=1e-5)
        np.testing.assert_allclose(cache[f"blocks.{l}.hook_resid_mid"],
                                   cache[f"blocks.{l}.hook_resid_pre"] + cache[f"blocks.{l}.hook_attn_out"],
                                   atol=1e-5)


def test_cache_memory_is_linear_in_length_without_patterns():
    """T = 8192 with every hook but the patterns: the activations are O(T) (about 110 MB here); one
    layer's pattern alone would be H x T^2 x 4 bytes = 2.1 GB."""
    code = f"""
import resource, numpy as np, sinkscope
m = sinkscope.load({str(MODEL)!r})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ids = np.random.default_rng(0).integers(3, 512, 8192)
logits, cache = m.run_with_cache(ids, allow_long_context=True)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(cache), sum(a.nbytes for a in cache.values()), (after - before) * 1024)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
    assert out.returncode == 0, out.stderr
    n, cached, grown = map(int, out.stdout.split())
    print(f"T=8192: {n} activations, {cached / 2**20:.0f} MiB cached, peak RSS grew {grown / 2**20:.0f} MiB")
    assert n > 40
    assert grown < 3 * cached + (200 << 20)
    assert grown < (1 << 30)


# ---- Hooks: read, modify, replace; equal to the CLI's --ablate.

def test_hook_zero_ablation_equals_cli_ablate(model, sinkscope, tmp_path):
    """Zeroing blocks.1.hook_mlp_out at position 0 from Python gives the numbers explain --ablate
    mlp.1 --ablation zero reports for that intervention (same sample: BOS + the prompt)."""
    out = tmp_path / "explain.json"
    run_cli("explain", "--model", MODEL, "--prompt", TEXT, "--conditions", "bos", "--ablate", "mlp.1",
            "--ablation", "zero", "--json", out)
    effect = next(e for e in load_json(out)["interventions"] if e["kind"] == "set")
    eps = 0.3

    def zero_p0(act, hook):
        assert hook.name == "blocks.1.hook_mlp_out" and hook.layer == 1
        act[0, :] = 0

    ids = model.tokenize(TEXT, bos=True)
    L, H = model.n_layers, model.n_heads
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(L)] + \
            [f"blocks.{l}.hook_resid_post" for l in range(L)]
    _, cache = model.run_with_cache(ids, names=names, hooks=[("blocks.1.hook_mlp_out", zero_p0)])
    layer_sink = []
    ratios = []
    for l in range(L):
        alpha0 = cache[f"blocks.{l}.attn.hook_pattern"][:, :, 0].mean(axis=1)  # (H): mean over queries
        layer_sink.append(float((alpha0 > eps).mean()))
        norms = np.linalg.norm(cache[f"blocks.{l}.hook_resid_post"].astype(np.float64), axis=1)
        ratios.append(norms[0] / np.median(norms[1:]))
    # sink_after: Sink_0^eps pooled over the heads of the layers after the intervened one.
    assert np.mean(layer_sink[2:]) == pytest.approx(effect["sink_after"], abs=1e-12)
    # norm_ratio_after: the largest P0 norm ratio over the layers from the intervened one on.
    assert max(ratios[1:]) == pytest.approx(effect["norm_ratio_after"], rel=1e-5)
    # The ablation changed something the clean run has.
    _, clean = model.run_with_cache(ids, names=names[L:])
    clean_ratio = max(np.linalg.norm(clean[f"blocks.{l}.hook_resid_post"][0]) /
                      np.median(np.linalg.norm(clean[f"blocks.{l}.hook_resid_post"][1:], axis=1))
                      for l in range(1, L))
    assert clean_ratio == pytest.approx(effect["norm_ratio_clean"], rel=1e-5)
    assert abs(clean_ratio - max(ratios[1:])) > 1e-4


def test_hook_returning_an_array_replaces_the_activation(model):
    ids = model.tokenize(TEXT)
    seen = []

    def patch(act, hook):
        out = act.copy()
        out[0] = 0
        return out

    def observe(act, hook):
        seen.append(act.copy())

    model.forward(ids, hooks=[("blocks.0.hook_resid_post", patch), ("blocks.0.hook_resid_post", observe)])
    assert np.all(seen[0][0] == 0) and np.any(seen[0][1] != 0)


def test_patching_changes_the_logits_and_clean_runs_are_unchanged(model):
    ids = model.tokenize(TEXT)
    clean = model.forward(ids)
    patched = model.forward(ids, hooks=[("blocks.0.hook_resid_post",
                                         lambda act, hook: np.zeros_like(act))])
    assert np.abs(patched - clean).max() > 1e-3
    assert np.array_equal(model.forward(ids), clean)


# ---- The verbs from Python equal the CLI's JSON.

def test_analyze_equals_cli_json(model, sinkscope, tmp_path):
    out = tmp_path / "analyze.json"
    args = ["--conditions", "bos,no-bos,random-p0", "--samples", 6, "--length", 48, "--seed", 3,
            "--patterns", "0:1"]
    run_cli("analyze", "--model", MODEL, *args, "--json", out)
    r = sinkscope.analyze(model, conditions=["bos", "no-bos", "random-p0"], samples=6, length=48,
                          seed=3, patterns="0:1")
    assert json.loads(r.to_json()) == load_json(out)
    bos = r.conditions["bos"]
    assert bos["alpha"].shape == (4, model.n_layers, model.n_heads)
    cli = load_json(out)
    assert bos["patterns"][(0, 1)].shape == (48, 48)
    # The arrays are the JSON's numbers.
    cli_bos = next(c for c in cli["conditions"] if c["name"] == "bos")
    assert np.allclose(bos["sink_rate_per_layer"][0], [x for x in cli_bos["sink_rate_per_layer"][0]])


def test_analyze_from_ids_equals_cli_tokens_file(model, sinkscope, tmp_path):
    ids = model.tokenize(TEXT * 8, bos=False)
    tokens = tmp_path / "ids.txt"
    tokens.write_text(" ".join(map(str, ids)) + "\n")
    out = tmp_path / "analyze.json"
    run_cli("analyze", "--model", MODEL, "--tokens", tokens, "--conditions", "bos", "--samples", 4,
            "--length", 32, "--json", out)
    r = sinkscope.analyze(model, ids, conditions="bos", samples=4, length=32)
    cli = load_json(out)
    assert cli["settings"]["source"] == f"token ids {tokens}"
    assert without(json.loads(r.to_json()), "settings.source") == without(cli, "settings.source")


def test_analyze_list_of_texts_is_one_stream(model, sinkscope):
    parts = [TEXT, "The dog ran to the park.", TEXT]
    a = sinkscope.analyze(model, parts, conditions="bos", samples=3, length=16, seed=1)
    b = sinkscope.analyze(model, "\n\n".join(parts), conditions="bos", samples=3, length=16, seed=1)
    assert a.to_json() == b.to_json()


def test_explain_equals_cli_json(model, sinkscope, tmp_path):
    out = tmp_path / "explain.json"
    run_cli("explain", "--model", MODEL, "--samples", 4, "--length", 32, "--intervention-samples", 2,
            "--json", out)
    r = sinkscope.explain(model, samples=4, length=32, intervention_samples=2)
    assert without(json.loads(r.to_json()), "seconds") == without(load_json(out), "seconds")
    assert r.verdict == load_json(out)["verdict"] == r.data["verdict"]
    assert len(r.data["layers"]) == model.n_layers
    assert r.p0_norm_ratio.shape == (model.n_layers,)


def test_stream_equals_cli_json(model, sinkscope, tmp_path):
    ids = model.tokenize(TEXT * 6, bos=True)
    tokens = tmp_path / "ids.txt"
    tokens.write_text(" ".join(map(str, ids)) + "\n")
    out = tmp_path / "stream.json"
    csv = tmp_path / "nll.csv"
    run_cli("stream", "--model", MODEL, "--tokens", tokens, "--compare", "window,sinks",
            "--sinks", 2, "--window", 30, "--json", out, "--csv", csv)
    r = sinkscope.stream(model, ids, policy=["window", "sinks"], sinks=2, window=30)
    timing = [f"runs.{i}.{k}" for i in range(2) for k in ("seconds", "tokens_per_second")]
    mine, cli = json.loads(r.to_json()), load_json(out)
    for i in range(2):
        for k in ("seconds", "tokens_per_second"):
            mine["runs"][i].pop(k), cli["runs"][i].pop(k)
    assert without(mine, "text", "model") == without(cli, "text", "model")
    # The per-token NLL vector is the CLI's CSV column (6 decimals there).
    rows = [line.split(",") for line in csv.read_text().splitlines()[1:]]
    sinks_nll = np.array([float(row[3]) for row in rows if row[0] == "sinks"])
    assert r.runs[1]["policy"] == "sinks" and r.runs[1]["nll"].shape == (len(ids) - 1,)
    assert np.abs(r.runs[1]["nll"] - sinks_nll).max() < 1e-5
    assert timing  # the keys compared above exist in both documents


def test_stream_typed_cache_equals_cli_json(model, sinkscope, tmp_path):
    ids = model.tokenize(TEXT * 6, bos=True)
    tokens = tmp_path / "ids.txt"
    tokens.write_text(" ".join(map(str, ids)) + "\n")
    out = tmp_path / "stream.json"
    run_cli("stream", "--model", MODEL, "--tokens", tokens, "--sinks", 2, "--window", 30,
            "--kv-type-k", "q8_0", "--kv-type-v", "q4_0", "--kv-keep", "first:2", "--json", out)
    r = sinkscope.stream(model, ids, sinks=2, window=30, kv_type_k="q8_0", kv_type_v="q4_0",
                         kv_keep="first:2")
    mine, cli = json.loads(r.to_json()), load_json(out)
    for doc in (mine, cli):
        for k in ("seconds", "tokens_per_second"):
            doc["runs"][0].pop(k)
    assert without(mine, "text", "model") == without(cli, "text", "model")
    run = r.runs[0]
    assert (run["kv_type_k"], run["kv_type_v"], run["kv_keep"]) == ("q8_0", "q4_0", "first:2")
    f32 = sinkscope.stream(model, ids, sinks=2, window=30).runs[0]
    assert run["kv_bytes_per_token"] < 0.25 * f32["kv_bytes_per_token"]
    assert np.abs(run["nll"] - f32["nll"]).max() > 0  # the rounding reaches the scores
    with pytest.raises(ValueError, match="--kv-type"):
        sinkscope.stream(model, ids, kv_type="q3")


def test_trace_equals_cli_json(sinkscope, train_run, tmp_path):
    out = tmp_path / "trace.json"
    run_cli("trace", "--checkpoints", train_run, "--samples", 4, "--length", 32, "--no-cache",
            "--json", out)
    r = sinkscope.trace(train_run, samples=4, length=32, no_cache=True)
    assert json.loads(r.to_json()) == load_json(out)
    assert r.steps.tolist() == [2, 4, 6]
    assert len(r.stages) == 3 and all(s != "failed" for s in r.stages)


# ---- Bad input: Python exceptions with the engine's message; the model stays usable.

def test_bad_input_raises_and_model_stays_usable(model, sinkscope, tmp_path):
    ids = model.tokenize(TEXT)
    with pytest.raises(FileNotFoundError):
        sinkscope.load(tmp_path / "missing.bin")
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"not a model at all")
    with pytest.raises(ValueError, match="bad.bin"):
        sinkscope.load(bad)
    with pytest.raises(sinkscope.Error, match="no tokens|empty"):
        sinkscope.analyze(model, "", samples=2, length=8)
    with pytest.raises(ValueError, match="not a hook name"):
        model.run_with_cache(ids, names=["blocks.0.hook_nothing"])
    with pytest.raises(ValueError, match="layer 9"):
        model.run_with_cache(ids, names=["blocks.9.hook_resid_post"])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.forward([1, 2, 100000])
    with pytest.raises(ValueError, match="shape"):
        model.forward(ids, hooks=[("blocks.0.hook_mlp_out", lambda a, h: a[:1])])
    with pytest.raises(ValueError, match="float32"):
        model.forward(ids, hooks=[("blocks.0.hook_mlp_out", lambda a, h: a.astype(np.float64))])
    with pytest.raises(TypeError, match="expected None or a numpy array"):
        model.forward(ids, hooks=[("blocks.0.hook_mlp_out", lambda a, h: [0.0])])

    def boom(act, hook):
        raise RuntimeError("boom from a hook")

    with pytest.raises(RuntimeError, match="boom from a hook"):
        model.forward(ids, hooks=[("blocks.2.hook_resid_pre", boom)])
    with pytest.raises(ValueError, match="--eps|eps"):
        sinkscope.analyze(model, eps=float("nan"), samples=2, length=8)
    with pytest.raises(ValueError, match="condition"):
        sinkscope.analyze(model, conditions="bos,nope", samples=2, length=8)
    with pytest.raises(ValueError, match="policy"):
        sinkscope.stream(model, ids, policy="nope")
    with pytest.raises(ValueError, match="context"):
        model.forward(np.ones(600, dtype=np.int64))
    # Still usable, with the same results.
    ref = load_json(REFERENCES[0])
    logits, ref_logits = model.forward(ref["tokens"]), np.array(ref["logits"])
    assert np.abs(logits - ref_logits).max() / np.abs(ref_logits).max() < 1e-5


# ---- Hooks that break the array they were given; arguments of the wrong kind.

def test_hook_that_shrinks_a_large_activation_in_place_raises_naming_the_hook(model):
    """A hook that resizes the (H, 512, 512) pattern of a 512-token forward to one element: the
    wrapper copied H x 512 x 512 floats out of the 4-byte buffer numpy left (a crash). In a child
    process, so that a regression fails this test alone."""
    code = f"""
import numpy as np, sinkscope
m = sinkscope.load({str(MODEL)!r})
ids = np.arange(512) % 509 + 3
def shrink(act, hook):
    act.resize((1,), refcheck=False)
try:
    m.forward(ids, hooks=[("blocks.0.attn.hook_pattern", shrink)])
except ValueError as e:
    print(e)
print(m.forward(ids[:8]).shape)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
    assert out.returncode == 0, f"exit status {out.returncode}: {out.stderr}"
    assert out.stdout.splitlines() == [
        f"hook blocks.0.attn.hook_pattern: the hook changed the array's shape from ({model.n_heads}, "
        "512, 512) to (1,); modify it in place or return a new array of the same shape",
        "(8, 512)"]


IN_PLACE_CHANGES = {
    "shrunk": ("blocks.0.hook_mlp_out", lambda a: a.resize((1,), refcheck=False),
               "shape from ({T}, {D}) to (1,)"),
    "grown": ("blocks.0.hook_mlp_out",
              lambda a: a.resize((2 * a.shape[0], a.shape[1]), refcheck=False),
              "shape from ({T}, {D}) to ({T2}, {D})"),
    "reshaped": ("blocks.0.hook_mlp_out", lambda a: setattr(a, "shape", (a.shape[1], a.shape[0])),
                 "shape from ({T}, {D}) to ({D}, {T})"),
    "retyped": ("blocks.0.hook_mlp_out", lambda a: setattr(a, "dtype", np.int32),
                "dtype from float32 to int32"),
    "restrided": ("blocks.0.attn.hook_pattern",  # (H, T, T): each head's pattern transposed
                  lambda a: setattr(a, "strides", (a.strides[0], 4, a.strides[1])),
                  "strides (it is no longer C-contiguous)"),
}


@pytest.mark.parametrize("case", sorted(IN_PLACE_CHANGES))
def test_hook_that_changes_its_array_in_place_raises_naming_the_hook(model, case):
    """On a small activation the copy read past the shrunk buffer (or reinterpreted the bytes) and
    gave wrong logits without an error. The model gives the clean logits afterwards."""
    name, change, what = IN_PLACE_CHANGES[case]
    ids = model.tokenize(TEXT)
    clean = model.forward(ids)
    T, D = len(ids), model.config["dim"]
    message = (f"hook {name}: the hook changed the array's " + what.format(T=T, D=D, T2=2 * T) +
               "; modify it in place or return a new array of the same shape")
    with pytest.raises(ValueError) as info:
        model.forward(ids, hooks=[(name, lambda act, hook: change(act))])
    assert str(info.value) == message
    assert np.array_equal(model.forward(ids), clean)


def _resized_and_returned(a):
    a.resize((3,), refcheck=False)
    return a


@pytest.mark.parametrize("make, what", [
    (lambda a: a[:1], "an array of shape (1, {D}); expected ({T}, {D})"),
    (lambda a: a.reshape(-1), "an array of shape ({TD},); expected ({T}, {D})"),
    (_resized_and_returned, "an array of shape (3,); expected ({T}, {D})"),
    (lambda a: a.astype(np.float64), "an array of dtype float64; expected float32"),
    (lambda a: a.astype(np.float16), "an array of dtype float16; expected float32"),
    (lambda a: a.view(np.int32), "an array of dtype int32; expected float32"),
], ids=["slice", "flat", "resized", "float64", "float16", "int32"])
def test_hook_returning_a_wrong_array_raises_naming_the_hook(model, make, what):
    ids = model.tokenize(TEXT)
    clean = model.forward(ids)
    T, D = len(ids), model.config["dim"]
    with pytest.raises(ValueError) as info:
        model.forward(ids, hooks=[("blocks.0.hook_mlp_out", lambda act, hook: make(act))])
    assert str(info.value) == ("hook blocks.0.hook_mlp_out: the hook returned " +
                               what.format(T=T, D=D, TD=T * D) +
                               "; return a float32 array of the activation's shape, or None")
    assert np.array_equal(model.forward(ids), clean)
    # A float32 array of the right shape in another memory order is read in its logical order.
    zeros = model.forward(ids, hooks=[("blocks.0.hook_mlp_out",
                                       lambda act, hook: np.zeros_like(act))])
    fortran = model.forward(ids, hooks=[("blocks.0.hook_mlp_out",
                                         lambda act, hook: np.asfortranarray(np.zeros_like(act)))])
    assert np.array_equal(zeros, fortran)


def test_hook_and_cache_names_must_be_strings(model):
    ids = model.tokenize(TEXT)
    with pytest.raises(TypeError, match=r"^hooks: hook names must be strings, got int$"):
        model.forward(ids, hooks=[(3, lambda act, hook: None)])
    with pytest.raises(TypeError, match=r"^hooks: hook names must be strings, got NoneType$"):
        model.run_with_cache(ids, names=["hook_embed"], hooks=[[None, lambda act, hook: None]])
    with pytest.raises(TypeError, match=r"^names: hook names must be strings, got bytes$"):
        model.run_with_cache(ids, names=[b"hook_embed"])
    with pytest.raises(TypeError, match=r"^names: expected a list of hook names, got str$"):
        model.run_with_cache(ids, names="hook_embed")
    with pytest.raises(TypeError, match=r"found an item of type function"):
        model.forward(ids, hooks=[lambda act, hook: None])
    with pytest.raises(TypeError, match=r"pairs, got str"):
        model.forward(ids, hooks="hook_embed")
    with pytest.raises(ValueError, match=r"found an item of 3 elements"):
        model.forward(ids, hooks=[("hook_embed", lambda act, hook: None, 1)])
    _, cache = model.run_with_cache(ids, names=("hook_embed",))
    assert list(cache) == ["hook_embed"]


def test_set_threads_has_the_domain_of_the_cli_threads_flag(sinkscope):
    """One domain, 1 to 4096 (ss::kMaxThreads), refused outside it by set_threads and --threads
    alike (100000 was clamped silently)."""
    before = sinkscope.threads()
    for n in (0, -1, 4097, 100000, 2**40):
        with pytest.raises(ValueError, match=rf"^threads: expected a thread count in \[1, 4096\], got {n}$"):
            sinkscope.set_threads(n)
        cli = run_cli("inspect", "--model", MODEL, "--threads", n, check=False)
        assert cli.returncode == 1, cli.stderr
        assert f"--threads: expected a thread count in [1, 4096], got {n}" in cli.stderr
    assert sinkscope.threads() == before
    # Inside the domain, a count the OpenBLAS in use cannot run (Debian's is built for 64) is
    # refused naming its limit, in both, and the count stays; the limit itself is taken.
    try:
        try:
            sinkscope.set_threads(4096)
            limit = 4096
        except ValueError as e:
            match = re.match(r"threads: 4096 threads asked, but the OpenBLAS in use runs at most "
                             r"(\d+) \(OpenBLAS", str(e))
            assert match, str(e)
            limit = int(match.group(1))
            assert sinkscope.threads() == before
            cli = run_cli("inspect", "--model", MODEL, "--threads", 4096, check=False)
            assert cli.returncode == 1 and f"--threads: {str(e)[len('threads: '):]}" in cli.stderr
            sinkscope.set_threads(limit)
        assert sinkscope.threads() == limit
    finally:
        sinkscope.set_threads(before)
    assert sinkscope.threads() == before


def test_load_checks_a_given_tokenizer_at_once(sinkscope, tmp_path):
    """A tokenizer passed to load() is read at load: a file that is not one fails there, naming it
    (it failed only at the first tokenize)."""
    with pytest.raises(ValueError, match="^/etc/passwd: "):
        sinkscope.load(MODEL, tokenizer="/etc/passwd")
    short = tmp_path / "tok.bin"
    short.write_bytes(b"\x05\x00")
    with pytest.raises(ValueError, match=str(short)):
        sinkscope.load(MODEL, tokenizer=short)
    m = sinkscope.load(MODEL, tokenizer=REPO / "models" / "stories260K" / "tok512.bin")
    assert m.tokenize("Once upon a time").tolist()[:2] == [1, 403]


def test_out_of_vocabulary_ids_are_named_as_given(model):
    """uint64 ids are not cast to int64 first: 2^63 + 5 is named as such, not as a negative id."""
    vocab = f"is outside the vocabulary \\(0\\.\\.{model.config['vocab_size'] - 1}\\)"
    with pytest.raises(ValueError, match=rf"^ids: token id 9223372036854775813 at index 1 {vocab}$"):
        model.forward(np.array([1, 2**63 + 5], dtype=np.uint64))
    with pytest.raises(ValueError, match=r"token id 18446744073709551615 at index 0 "):
        model.forward(np.array([2**64 - 1], dtype=np.uint64))
    with pytest.raises(ValueError, match=r"token id 9223372036854775813 at index 0 "):
        model.detokenize([2**63 + 5])  # a list: numpy makes it a uint64 array
    with pytest.raises(ValueError, match=r"token id -3 at index 2 "):
        model.forward(np.array([1, 2, -3], dtype=np.int8))
    with pytest.raises(ValueError, match=r"token id 9223372036854775813 at index 0 "):
        model.forward(np.array([2**63 + 5, 1], dtype=np.uint64)[::-1][::-1])
    assert np.array_equal(model.forward(np.array([1, 403, 407], dtype=np.uint16)),
                          model.forward([1, 403, 407]))


def test_long_calls_release_the_gil(model, sinkscope):
    ticks = 0
    done = threading.Event()

    def work():
        sinkscope.analyze(model, conditions="bos", samples=64, length=256)
        done.set()

    t = threading.Thread(target=work)
    t.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    t.join()
    assert ticks > 20


def test_concurrent_calls_from_two_threads_equal_serial_ones(model, sinkscope):
    kwargs = [dict(conditions="bos", samples=8, length=64, seed=1),
              dict(conditions="no-bos,repeat", samples=6, length=48, seed=2)]
    serial = [sinkscope.analyze(model, **k).to_json() for k in kwargs]
    out = [None, None]

    def work(i):
        out[i] = sinkscope.analyze(model, **kwargs[i]).to_json()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == serial


def test_ctrl_c_interrupts_analyze():
    code = f"""
import sys, sinkscope
m = sinkscope.load({str(MODEL)!r})
print("started", flush=True)
try:
    sinkscope.analyze(m, conditions="bos", samples=100000, length=256)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    print(m.forward([1, 2, 3]).shape, flush=True)
    sys.exit(0)
sys.exit(3)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ)
    assert proc.stdout.readline().strip() == "started"
    time.sleep(1.0)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - sent
    assert proc.returncode == 0, err
    assert "interrupted" in out and "(3, 512)" in out
    print(f"stopped {elapsed:.2f} s after SIGINT")
    assert elapsed < 20


def test_plots_render(model, sinkscope, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    from sinkscope import plots
    r = sinkscope.analyze(model, conditions="bos,no-bos", samples=2, length=32)
    s = sinkscope.stream(model, model.tokenize(TEXT * 4), policy=["window", "sinks"], sinks=2,
                         window=20)
    for name, fig in [("heatmap", plots.alpha_heatmap(r, "bos")),
                      ("rate", plots.sink_rate_per_layer(r)),
                      ("norm", plots.p0_norm_ratio(r)),
                      ("nll", plots.stream_nll(s))]:
        path = tmp_path / f"{name}.png"
        fig.savefig(path)
        assert path.stat().st_size > 5000, name


def test_type_stub_covers_the_api(sinkscope):
    """Every public name and every public method or property of the classes has a type hint in
    __init__.pyi (shipped with the package)."""
    import ast
    import pathlib
    stub = ast.parse((pathlib.Path(sinkscope.__file__).parent / "__init__.pyi").read_text())
    top = {n.name: n for n in stub.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    missing = [name for name in sinkscope.__all__ if name not in top]
    for name, node in top.items():
        if isinstance(node, ast.ClassDef) and hasattr(sinkscope, name):
            members = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} | \
                      {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
            cls = getattr(sinkscope, name)
            if isinstance(cls, type) and not issubclass(cls, BaseException):
                missing += [f"{name}.{a}" for a in dir(cls) if not a.startswith("_") and a not in members]
    assert not missing, missing


def test_openmp_openblas_even_when_numpy_is_imported_first(tmp_path):
    """numpy loads Debian's default libopenblas.so.0 (often the pthread build); the extension must
    still call the OpenMP build, as the CLI does (same threads, same sums)."""
    code = ("import numpy, sinkscope, json; numpy.ones((64, 64)) @ numpy.ones((64, 64)); "
            "print(json.dumps(sinkscope.blas_info()))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ})
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["openmp"], info
    assert "openblas-openmp" in info["library"], info
    assert info["bf16_kernel"] in ("amx_bf16", "avx512_bf16", "avx512_fma", "avx2", "portable")
    assert info["q8_0_kernel"] in ("avx512", "avx2", "portable")
    assert info["native_kernel"] in ("avx512", "avx2", "portable")


def test_precision_q8_0_is_close_to_f32_and_recorded(sinkscope):
    """load(precision="q8_0") holds the projections as Q8_0 blocks: logits within the Q8_0 rounding
    of the f32 model's (not equal: the quantisation ran), the precision in the model's info; an
    unknown precision raises and names the choices."""
    f32 = sinkscope.load(MODEL)
    q8 = sinkscope.load(MODEL, precision="q8_0")
    ids = f32.tokenize(TEXT)
    a, b = f32.forward(ids), q8.forward(ids)
    rel = float(np.max(np.abs(a - b)) / np.max(np.abs(a)))
    print(f"q8_0 vs f32 logits on stories260K: max rel diff {rel:.3g}")
    assert 0 < rel < 3e-2
    assert q8.config["precision"] == "q8_0"
    with pytest.raises(ValueError, match="expected f32, bf16, q8_0 or native"):
        sinkscope.load(MODEL, precision="int8")


def test_learned_sink_slot_in_the_analysis_dict(sinkscope, tmp_path):
    """A gpt-oss directory (scripts/make_test_model.py, sink logits 4): the condition dict carries
    alpha_sink (layer x head) beside alpha, and the per-layer windows."""
    out = tmp_path / "gptoss"
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_test_model.py"), "--preset", "gpt-oss-tiny",
                    "--sink-logit", "4", "--out", str(out)], check=True, capture_output=True)
    m = sinkscope.load(str(out))
    tokens = [3 + (7 * i) % 500 for i in range(200)]
    r = sinkscope.analyze(m, tokens, conditions="no-bos", samples=2, length=32)
    c = r.conditions["no-bos"]
    assert c["alpha_sink"].shape == (4, 8)
    assert c["sink_slot_rate"] == 1.0  # every head puts more than eps on its slot
    assert float(c["alpha"][0].max()) < 0.3
    assert list(c["layer_window"]) == [16, 0, 16, 0]
    assert "learned sink slot" in r.summary()


def test_gated_attention_model_exposes_its_gate(sinkscope, tmp_path):
    """A checkpoint of `train --set attention=gated`: hook_gate is the sigmoid gate (T, H, Dh), in
    (0, 1); zeroing it through a hook zeroes the attention's contribution (hook_attn_out), and
    analyze's condition dict carries the gate's means."""
    run = tmp_path / "gated"
    run_cli("train", "--preset", "quick", "--set", "attention=gated", "--steps", 4, "--checkpoint-every", 4,
            "--eval-every", 4, "--threads", 1, "--out", run)
    m = sinkscope.load(run / "step-4")
    ids = np.arange(1, 17) % 64
    _, cache = m.run_with_cache(ids, names=["blocks.0.attn.hook_gate", "blocks.0.hook_attn_out"])
    g = cache["blocks.0.attn.hook_gate"]
    assert g.shape == (16, 4, 16) and float(g.min()) > 0 and float(g.max()) < 1
    _, closed = m.run_with_cache(ids, names=["blocks.0.hook_attn_out"],
                                 hooks=[("blocks.0.attn.hook_gate", lambda a, hook: np.zeros_like(a))])
    assert np.abs(closed["blocks.0.hook_attn_out"]).max() == 0
    assert np.abs(cache["blocks.0.hook_attn_out"]).max() > 0
    c = sinkscope.analyze(m, ids, conditions="bos", samples=1, length=16).conditions["bos"]
    assert c["gate_p0"].shape == (2,) and 0 < float(c["gate_rest"][0]) < 1


def test_sigmoid_and_kv_bias_models_report_their_attention(sinkscope, tmp_path):
    """Checkpoints of `train --set attention=sigmoid|kv-bias`: the config names the variant; a
    sigmoid model's pattern rows do not sum to 1 and analyze reports the weights themselves
    (alpha0_raw, row_sum) beside the proxy alpha; a kv-bias model's rows sum to 1 - alpha_sink."""
    ids = np.arange(1, 17) % 64
    for variant in ("sigmoid", "kv-bias"):
        run = tmp_path / variant
        run_cli("train", "--preset", "quick", "--set", f"attention={variant}", "--steps", 4,
                "--checkpoint-every", 4, "--eval-every", 4, "--threads", 1, "--out", run)
        m = sinkscope.load(run / "step-4")
        assert m.config["attn_sigmoid"] == (variant == "sigmoid")
        assert m.config["attn_kv_bias"] == (variant == "kv-bias")
        _, cache = m.run_with_cache(ids, names=["blocks.0.attn.hook_pattern"])
        rows = cache["blocks.0.attn.hook_pattern"].sum(-1)  # (H, T)
        c = sinkscope.analyze(m, ids, conditions="no-bos", samples=1, length=16).conditions["no-bos"]
        if variant == "sigmoid":
            assert np.abs(rows - 1).max() > 1e-3
            assert c["row_sum"].shape == (2, 4) and "alpha_sink" not in c
            np.testing.assert_allclose(c["row_sum"][0], rows.mean(-1), rtol=1e-4)
            p = cache["blocks.0.attn.hook_pattern"]
            np.testing.assert_allclose(c["alpha0_raw"][0], p[:, :, 0].mean(-1), rtol=1e-4, atol=1e-7)
        else:
            assert "row_sum" not in c
            np.testing.assert_allclose(rows.mean(-1), 1 - c["alpha_sink"][0], rtol=1e-4)


# ---- Hardening (docs/GUARANTEES.md): input that once killed the interpreter or gave wrong numbers.

def test_a_prompt_shorter_than_k_raises_and_the_interpreter_lives(sinkscope, model):
    with pytest.raises(sinkscope.Error, match=r"--first-k.*no-bos"):
        sinkscope.analyze(model, "hi there", prompt=True)
    assert sinkscope.analyze(model, "hi there", prompt=True, first_k=3).to_json()


def test_huge_finite_activations_keep_meaningful_logits(model):
    ids = model.tokenize(TEXT)
    # 1e19 in every lane: the next norm's float sum of squares overflows; the norm must still be
    # the row's direction, not zeros (which gave every logit exactly 0).
    logits = model.forward(ids, hooks=[("blocks.4.hook_resid_post",
                                        lambda act, hook: np.full_like(act, 1e19))])
    assert np.isfinite(logits).all()
    assert np.abs(logits).max() > 1e-3
    assert len(np.unique(np.round(logits[-1], 4))) > 1


def test_messages_speak_python(sinkscope, model):
    with pytest.raises(sinkscope.Error, match=r"allow_long_context=True") as e:
        model.forward(np.ones(600, dtype=np.int64))
    assert "--allow-long-context" not in str(e.value)
    with pytest.raises(sinkscope.Error, match=r"verify_top.*exhaustive"):
        sinkscope.explain(model, TEXT * 4, samples=2, length=16, exhaustive=True, verify_top=3)
    with pytest.raises(sinkscope.Error, match=r"blocks\.0\.attn\.hook_gate"):
        model.run_with_cache(model.tokenize(TEXT), names=["blocks.0.attn.hook_gate"])
    # Layer numbers as hook_names() spells them: a leading zero or a number past int is no name.
    for bad in ["blocks.01.hook_resid_post", "blocks.4294967295.hook_q"]:
        with pytest.raises(sinkscope.Error):
            model.run_with_cache(model.tokenize(TEXT), names=[bad])


def test_a_model_file_truncated_under_a_live_model(sinkscope, tmp_path):
    path = tmp_path / "m.bin"
    path.write_bytes(MODEL.read_bytes())
    (tmp_path / "tok512.bin").write_bytes((MODEL.parent / "tok512.bin").read_bytes())
    m = sinkscope.load(str(path))
    ids = m.tokenize(TEXT)
    m.forward(ids)
    os.truncate(path, 4096)
    with pytest.raises(sinkscope.Error, match=r"m\.bin: the file changed on disk"):
        m.forward(ids)
