"""scripts/make_test_model.py: tiny random Llama directories in BF16, F32 and sharded, loaded by the
engine; BF16 bytes are the round-to-nearest-even of the F32 draw."""

import json
import re
import struct
import subprocess
import sys

import numpy as np

from conftest import REPO, run_cli

SCRIPT = REPO / "scripts" / "make_test_model.py"
SHAPE = ["--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "172",
         "--vocab", "512", "--ctx", "256", "--seed", "7"]


def make(path, *extra):
    subprocess.run([sys.executable, str(SCRIPT), *SHAPE, "--out", str(path), *extra], check=True,
                   capture_output=True)
    return path


def read_safetensors(path):
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = data[8 + n + b:8 + n + e]
        dtype = {"BF16": "<u2", "F32": "<f4"}[t["dtype"]]
        out[name] = np.frombuffer(raw, dtype).reshape(t["shape"])
    return out


def test_bf16_is_the_rounded_f32_draw_and_all_load(sinkscope, tmp_path):
    f32 = make(tmp_path / "f32", "--dtype", "f32")
    bf16 = make(tmp_path / "bf16", "--dtype", "bf16")
    sharded = make(tmp_path / "sharded", "--dtype", "bf16", "--shard-gb", "0.0001")
    a = read_safetensors(f32 / "model.safetensors")
    b = read_safetensors(bf16 / "model.safetensors")
    assert a.keys() == b.keys() and len(a) == 2 + 2 * 9 + 1
    for name in a:
        bits = a[name].view(np.uint32).astype(np.uint64)
        rne = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        assert np.array_equal(rne, b[name]), name
    assert len(list(sharded.glob("model-*-of-*.safetensors"))) > 1
    assert (sharded / "model.safetensors.index.json").exists()

    ids = np.arange(1, 40) * 7 % 512
    m32, m16, msh = (sinkscope.load(p) for p in (f32, bf16, sharded))
    assert m16.config["n_layers"] == 2 and m16.config["n_kv_heads"] == 2
    l32, l16, lsh = m32.forward(ids), m16.forward(ids), msh.forward(ids)
    assert np.array_equal(l16, lsh)  # same bytes, shards or not
    rel = np.abs(l16 - l32).max() / np.abs(l32).max()
    print(f"bf16 vs f32 weights: largest logit difference {rel:.3g} of the largest logit")
    assert 0 < rel < 0.05
    # load()'s default is the file's precision: native for BF16, f32 for F32, the same numbers as
    # the explicit value.
    assert m16.config["precision"] == "native" and m32.config["precision"] == "f32"
    assert np.array_equal(l16, sinkscope.load(bf16, precision="native").forward(ids))
    assert np.array_equal(l32, sinkscope.load(f32, precision="f32").forward(ids))


def test_refuses_an_existing_directory_and_bad_shapes(tmp_path):
    (tmp_path / "x").mkdir()
    r = subprocess.run([sys.executable, str(SCRIPT), *SHAPE, "--out", str(tmp_path / "x")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "exists" in r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), "--layers", "2", "--dim", "63", "--heads", "4",
                        "--ffn", "8", "--vocab", "16", "--out", str(tmp_path / "y")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "multiple" in r.stderr and not (tmp_path / "y").exists()


def test_phi3_fused_layout_equals_the_same_weights_as_llama(sinkscope, tmp_path):
    """--family phi3: the fused qkv_proj / gate_up_proj directory gives the logits of the same
    weights split into Llama's q/k/v and gate/up (rows [q | k | v] and [gate | up], as
    modeling_phi3.py slices them), written as a plain Llama directory by this test."""
    phi3 = make(tmp_path / "phi3", "--dtype", "f32", "--family", "phi3")
    w = read_safetensors(phi3 / "model.safetensors")
    cfg = json.loads((phi3 / "config.json").read_text())
    assert cfg["model_type"] == "phi3" and "model.layers.0.self_attn.qkv_proj.weight" in w
    hd, q, kv, ffn = 16, 4 * 16, 2 * 16, 172
    split = {}
    for name, t in w.items():
        if name.endswith("qkv_proj.weight"):
            base = name[:-len("qkv_proj.weight")]
            split[base + "q_proj.weight"], split[base + "k_proj.weight"], split[base + "v_proj.weight"] = (
                t[:q], t[q:q + kv], t[q + kv:])
        elif name.endswith("gate_up_proj.weight"):
            base = name[:-len("gate_up_proj.weight")]
            split[base + "gate_proj.weight"], split[base + "up_proj.weight"] = t[:ffn], t[ffn:]
        else:
            split[name] = t
    assert hd * 4 == cfg["hidden_size"]
    llama = tmp_path / "llama"
    llama.mkdir()
    header, blobs, offset = {}, [], 0
    for name, t in split.items():
        b = np.ascontiguousarray(t, "<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (llama / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    lcfg = {k: v for k, v in cfg.items() if k not in ("sliding_window", "partial_rotary_factor")}
    lcfg.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    (llama / "config.json").write_text(json.dumps(lcfg))
    ids = np.arange(1, 40) * 7 % 512
    a, b = sinkscope.load(phi3).forward(ids), sinkscope.load(llama).forward(ids)
    assert sinkscope.load(phi3).config["arch"] == "phi3"
    rel = np.abs(a - b).max() / np.abs(b).max()
    print(f"phi3 fused vs llama split: largest logit difference {rel:.3g} of the largest logit")
    assert rel < 1e-6
    # A window shorter than the input changes the logits (every layer slides).
    windowed = make(tmp_path / "phi3w", "--dtype", "f32", "--family", "phi3", "--window", "8")
    assert np.abs(sinkscope.load(windowed).forward(ids) - a).max() > 1e-3


def test_planted_p0_circuit_is_found(sinkscope, tmp_path):
    """--plant-p0-circuit 1 writes the paper's mechanism into random weights; explain names it
    (mlp.1, blocks 0-1) with its default fast path, and the exhaustive table agrees."""
    path = tmp_path / "planted"
    subprocess.run([sys.executable, str(SCRIPT), "--layers", "4", "--dim", "64", "--heads", "4",
                    "--ffn", "96", "--vocab", "64", "--ctx", "256", "--seed", "3",
                    "--plant-p0-circuit", "1", "--out", str(path)], check=True, capture_output=True)
    m = sinkscope.load(path)
    ids = list((np.arange(1, 2000) * 37 + 11) % 61 + 3)  # no BOS (id 1): the condition puts it first
    fast = sinkscope.explain(m, ids, samples=8, length=32)
    full = sinkscope.explain(m, ids, samples=8, length=32, exhaustive=True, early_stop=False)
    for r in (fast, full):
        assert r.verdict == "p0-circuit-in-blocks-0-1", r.summary()
        assert [c["name"] for c in r.data["circuit"]["components"]] == ["mlp.1"]
    assert fast.data["stopping"]["used"] == 2 and full.data["stopping"]["used"] == 8
    assert fast.data["estimates"]["verified"] == 16 < full.data["estimates"]["verified"]
    assert fast.data["forward_passes"] < full.data["forward_passes"]


def test_expert_scales_that_overflow_a_norm_give_the_model_s_numbers(tmp_path):
    # Every E8M0 scale of one layer's down experts at 0xC0 (2^65): the activations stay finite but
    # their squares overflow a float sum. The norms sum them in double, so the logits are the
    # model's (not all equal: a uniform distribution's perplexity is exactly the vocabulary size).
    out = tmp_path / "gptoss"
    subprocess.run([sys.executable, str(SCRIPT), "--preset", "gpt-oss-tiny", "--out", str(out)],
                   check=True, capture_output=True)
    shard = out / "model.safetensors"
    data = bytearray(shard.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    b, e = header["model.layers.1.mlp.experts.down_proj_scales"]["data_offsets"]
    data[8 + n + b:8 + n + e] = b"\xc0" * (e - b)
    shard.write_bytes(bytes(data))
    vocab = json.loads((out / "config.json").read_text())["vocab_size"]
    for precision in ["native", "f32"]:
        r = run_cli("ppl", "--model", str(out), "--precision", precision, "--prompt",
                    "Once upon a time there was a little girl", check=False)
        assert r.returncode == 0, r.stderr
        ppl = float(re.search(r"perplexity\s+([0-9.]+)", r.stdout).group(1))
        assert abs(ppl - vocab) > 1.0, (precision, ppl, vocab)
