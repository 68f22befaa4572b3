#!/usr/bin/env python3
"""Writes a random-weight Hugging Face Llama directory of a given shape (config.json, sharded
safetensors, model.safetensors.index.json), streaming to disk: memory stays at one chunk of one
tensor whatever the model's size, so a Llama-2-7B shape (13.5 GB in BF16) can be made on a small
machine for load and speed benchmarks without a download. Nothing this large is committed or made
in CI; the tests make tiny ones.

    python3 scripts/make_test_model.py --preset llama-2-7b --out /data/llama2-7b-random
    python3 scripts/make_test_model.py --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 172 \\
        --vocab 512 --out /tmp/tiny --dtype bf16

Weights: normal(0, 0.02) (norm weights 1), from numpy's PCG64 seeded with --seed, tensor by tensor in
the order written, so the same arguments give the same bytes. BF16 is rounded to nearest even from
the f32 draw, F16 by numpy. Safetensors layout (huggingface/safetensors README): 8-byte
little-endian header size, a JSON header of {name: {dtype, shape, data_offsets}}, then the data.
The directory is written under DIR.tmp-PID and renamed into place when complete.
"""
import argparse
import json
import os
import pathlib
import shutil
import struct
import sys

import numpy as np

# Published shapes (config.json of each model on the Hugging Face hub).
PRESETS = {
    "llama-2-7b": dict(layers=32, dim=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000, ctx=4096,
                       rope_theta=10000.0, norm_eps=1e-5),
    "llama-3-8b": dict(layers=32, dim=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, ctx=8192,
                       rope_theta=500000.0, norm_eps=1e-5),
    "mistral-7b": dict(layers=32, dim=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000, ctx=32768,
                       rope_theta=1000000.0, norm_eps=1e-5),
    "stories110m": dict(layers=12, dim=768, heads=12, kv_heads=12, ffn=2048, vocab=32000, ctx=1024,
                        rope_theta=10000.0, norm_eps=1e-5),
    "stories15m": dict(layers=6, dim=288, heads=6, kv_heads=6, ffn=768, vocab=32000, ctx=256,
                       rope_theta=10000.0, norm_eps=1e-5),
}
DTYPES = {"bf16": ("BF16", 2, "bfloat16"), "f16": ("F16", 2, "float16"), "f32": ("F32", 4, "float32")}
CHUNK = 1 << 22  # values drawn at a time


def tensors(s):
    """(name, shape, kind) in the order written; kind "norm" is all ones."""
    d, hd = s["dim"], s["dim"] // s["heads"]
    out = [("model.embed_tokens.weight", (s["vocab"], d), "w")]
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (d,), "norm"),
                (p + "self_attn.q_proj.weight", (s["heads"] * hd, d), "w"),
                (p + "self_attn.k_proj.weight", (s["kv_heads"] * hd, d), "w"),
                (p + "self_attn.v_proj.weight", (s["kv_heads"] * hd, d), "w"),
                (p + "self_attn.o_proj.weight", (d, s["heads"] * hd), "w"),
                (p + "post_attention_layernorm.weight", (d,), "norm"),
                (p + "mlp.gate_proj.weight", (s["ffn"], d), "w"),
                (p + "mlp.up_proj.weight", (s["ffn"], d), "w"),
                (p + "mlp.down_proj.weight", (d, s["ffn"]), "w")]
    out += [("model.norm.weight", (d,), "norm"), ("lm_head.weight", (s["vocab"], d), "w")]
    return out


def encode(x, dtype):
    if dtype == "f32":
        return x.astype("<f4").tobytes()
    if dtype == "f16":
        return x.astype("<f2").tobytes()
    bits = x.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return rounded.astype("<u2").tobytes()


def write_shard(path, items, dtype, rng):
    name, width, _ = DTYPES[dtype]
    header, offset = {}, 0
    for tname, shape, _ in items:
        n = int(np.prod(shape)) * width
        header[tname] = {"dtype": name, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt", "generator": "sinkscope scripts/make_test_model.py"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for tname, shape, kind in items:
            left = int(np.prod(shape))
            while left:
                n = min(left, CHUNK)
                x = np.ones(n, np.float32) if kind == "norm" else rng.normal(0, 0.02, n).astype(np.float32)
                f.write(encode(x, dtype))
                left -= n
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS))
    for k in ("layers", "dim", "heads", "kv_heads", "ffn", "vocab", "ctx"):
        ap.add_argument("--" + k.replace("_", "-"), type=int)
    ap.add_argument("--rope-theta", type=float)
    ap.add_argument("--norm-eps", type=float)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--shard-gb", type=float, default=4.0, help="largest shard (GB)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    s = dict(PRESETS[a.preset]) if a.preset else dict(ctx=2048, rope_theta=10000.0, norm_eps=1e-5)
    for k in ("layers", "dim", "heads", "kv_heads", "ffn", "vocab", "ctx", "rope_theta", "norm_eps"):
        if getattr(a, k) is not None:
            s[k] = getattr(a, k)
    s.setdefault("kv_heads", s.get("heads"))
    missing = [k for k in ("layers", "dim", "heads", "ffn", "vocab") if s.get(k) is None]
    if missing:
        sys.exit(f"make_test_model: give --preset or every shape flag (missing: {', '.join(missing)})")
    if s["dim"] % s["heads"] or s["heads"] % s["kv_heads"]:
        sys.exit("make_test_model: dim must be a multiple of heads, and heads of kv-heads")

    out = pathlib.Path(a.out)
    if out.exists():
        sys.exit(f"make_test_model: {out} exists; remove it first")
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    tmp.mkdir(parents=True)
    try:
        items = tensors(s)
        width = DTYPES[a.dtype][1]
        limit = int(a.shard_gb * 1e9)
        shards, cur, size = [], [], 0
        for t in items:
            n = int(np.prod(t[1])) * width
            if cur and size + n > limit:
                shards.append(cur)
                cur, size = [], 0
            cur.append(t)
            size += n
        shards.append(cur)
        rng = np.random.Generator(np.random.PCG64(a.seed))
        total, weight_map = 0, {}
        for i, group in enumerate(shards):
            fname = (f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" if len(shards) > 1
                     else "model.safetensors")
            total += write_shard(tmp / fname, group, a.dtype, rng)
            weight_map.update({t[0]: fname for t in group})
            print(f"wrote {fname} ({len(group)} tensors)", file=sys.stderr)
        if len(shards) > 1:
            (tmp / "model.safetensors.index.json").write_text(json.dumps(
                {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
        config = {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": s["dim"], "intermediate_size": s["ffn"], "num_hidden_layers": s["layers"],
            "num_attention_heads": s["heads"], "num_key_value_heads": s["kv_heads"],
            "vocab_size": s["vocab"], "max_position_embeddings": s["ctx"],
            "rms_norm_eps": s["norm_eps"], "rope_theta": s["rope_theta"], "hidden_act": "silu",
            "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
            "torch_dtype": DTYPES[a.dtype][2],
        }
        (tmp / "config.json").write_text(json.dumps(config, indent=1) + "\n")
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    params = sum(int(np.prod(t[1])) for t in items)
    print(f"{out}: {params / 1e6:,.2f} M parameters, {total / 1e6:,.1f} MB of {a.dtype} in "
          f"{len(shards)} shard(s)", file=sys.stderr)


if __name__ == "__main__":
    main()
