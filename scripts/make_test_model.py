#!/usr/bin/env python3
"""Writes a random-weight Hugging Face Llama directory of a given shape (config.json, sharded
safetensors, model.safetensors.index.json), streaming to disk: memory stays at one chunk of one
tensor whatever the model's size, so a Llama-2-7B shape (13.5 GB in BF16) can be made on a small
machine for load and speed benchmarks without a download. Nothing this large is committed or made
in CI; the tests make tiny ones.

    python3 scripts/make_test_model.py --preset llama-2-7b --out /data/llama2-7b-random
    python3 scripts/make_test_model.py --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 172 \\
        --vocab 512 --out /tmp/tiny --dtype bf16
    python3 scripts/make_test_model.py --preset gpt-oss-tiny --sink-logit 4 --out /tmp/gptoss

--family gpt_oss (the gpt-oss presets set it) writes the layout of the published gpt-oss
checkpoints (openai/gpt-oss-20b: transformers' GptOssForCausalLM with MXFP4 experts): the Llama
tensors plus attention biases, one learned sink logit per head (self_attn.sinks, filled with
--sink-logit, or normal(0, 1) if not given), a biased router, and the experts in MXFP4 as
mlp.experts.gate_up_proj_blocks (E, 2F, D/32, 16) + gate_up_proj_scales (E, 2F, D/32) and
down_proj_blocks (E, D, F/32, 16) + down_proj_scales (E, D, F/32), all U8, beside their biases
gate_up_proj_bias (E, 2F) / down_proj_bias (E, D) in --dtype; config.json carries the published
quantization_config. MXFP4 is the OCP Microscaling spec's: 32 E2M1 codes (4 bits, value 2j in
the low nibble of byte j, 2j + 1 in the high one) sharing one E8M0 scale byte 2^(e - 127); the
codes here are uniform random bytes and the scales 2^-8 .. 2^-6, so the weights have about the
other tensors' spread (uniform codes have an RMS of 2.9). --expert-dtype bf16|f16|f32 writes the
experts unquantised instead, fused and (in, out)-ordered as transformers holds them after
dequantising: mlp.experts.gate_up_proj (E, D, 2F) / down_proj (E, F, D). Layers alternate sliding
window (--window) and full attention from layer 0; RoPE is YaRN as gpt-oss's config.json. Shards
are named as the published ones (model-00000-of-0000N.safetensors, numbered from 0).

gpt_oss also gets a tokenizer.json that sinkscope's loader reads: byte-level BPE behind the o200k
Split (the pattern of tests/data/tokenizers/o200k_pretokenize.json, tiktoken's o200k_base /
o200k_harmony pat_str) with the model's vocabulary size, and the harmony special tokens of
o200k_harmony (openai/harmony, src/tiktoken_ext/public_encodings.rs): <|startoftext|> 199998,
<|endoftext|> 199999, <|return|> 200002, <|constrain|> 200003, <|channel|> 200005, <|start|> 200006,
<|end|> 200007, <|message|> 200008, <|call|> 200012, the <|reserved_N|> ids between them and from
200014 to the end of the vocabulary. The real o200k merges are not shipped (no copy of the
vocabulary is at hand, and it is not ours to ship): the regular tokens are the 256 bytes (GPT-2's
bytes_to_unicode order) and then synthetic merges (two characters, then three), enough to fill
ids 0 .. 199997, so texts encode to 2-3 characters a token. With a vocabulary smaller than
gpt-oss's 201088 (the tiny preset) the 16 named slots 199998 .. 200013 move to the top 16 ids,
in the same order, and nothing is reserved.

--family phi3 writes transformers' Phi3ForCausalLM layout: the Llama tensors with q, k, v fused in
self_attn.qkv_proj (rows [q | k | v]) and gate, up in mlp.gate_up_proj (rows [gate | up]); every
layer slides when --window is given; --partial-rotary sets partial_rotary_factor.

Weights: normal(0, 0.02) (norm weights 1), from numpy's PCG64 seeded with --seed, tensor by tensor in
the order written, so the same arguments give the same bytes. BF16 is rounded to nearest even from
the f32 draw, F16 by numpy. Safetensors layout (huggingface/safetensors README): 8-byte
little-endian header size, a JSON header of {name: {dtype, shape, data_offsets}}, then the data.
The directory is written under DIR.tmp-PID and renamed into place when complete.
"""
import argparse
import json
import math
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
    # Llama-3.2-1B (meta-llama/Llama-3.2-1B config.json): tied embeddings, llama3 RoPE scaling.
    "llama-3.2-1b": dict(layers=16, dim=2048, heads=32, kv_heads=8, ffn=8192, vocab=128256, ctx=131072,
                         rope_theta=500000.0, norm_eps=1e-5, tie=True,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "stories110m": dict(layers=12, dim=768, heads=12, kv_heads=12, ffn=2048, vocab=32000, ctx=1024,
                        rope_theta=10000.0, norm_eps=1e-5),
    "stories15m": dict(layers=6, dim=288, heads=6, kv_heads=6, ffn=768, vocab=32000, ctx=256,
                       rope_theta=10000.0, norm_eps=1e-5),
    # gpt-oss-20b (openai/gpt-oss-20b config.json): 24 layers, 32 experts of width 2880, top 4.
    "gpt-oss-20b": dict(family="gpt_oss", layers=24, dim=2880, heads=64, kv_heads=8, head_dim=64,
                        ffn=2880, experts=32, top_k=4, vocab=201088, ctx=131072, window=128,
                        rope_theta=150000.0, norm_eps=1e-5),
    "gpt-oss-tiny": dict(family="gpt_oss", layers=4, dim=64, heads=8, kv_heads=2, head_dim=8,
                         ffn=32, experts=4, top_k=2, vocab=512, ctx=16384, window=16,
                         rope_theta=150000.0, norm_eps=1e-5),
    # Qwen3.5-0.8B (Qwen/Qwen3.5-0.8B: 24 layers, width 1024, 8 / 2 heads, every fourth layer full
    # attention; the Gated DeltaNet and MLP widths are the family's proportions, docs/ARCHITECTURES.md).
    "qwen3.5-0.8b": dict(family="qwen3_5", layers=24, dim=1024, heads=8, kv_heads=2, head_dim=256,
                         ffn=3584, vocab=248320, ctx=262144, rope_theta=1e7, norm_eps=1e-6, tie=True,
                         lin_k_heads=16, lin_v_heads=16, lin_dim=128),
    # Qwen3.6-35B-A3B (qwen3_5_moe): 40 layers, 256 experts of 512 top-8 and a shared expert of 512.
    "qwen3.6-35b-a3b": dict(family="qwen3_5_moe", layers=40, dim=2048, heads=16, kv_heads=2,
                            head_dim=256, ffn=512, shared_ffn=512, experts=256, top_k=8, vocab=248320,
                            ctx=262144, rope_theta=1e7, norm_eps=1e-6, lin_k_heads=16, lin_v_heads=32,
                            lin_dim=128),
    "qwen3.5-tiny": dict(family="qwen3_5", layers=4, dim=64, heads=4, kv_heads=2, head_dim=16, ffn=128,
                         vocab=512, ctx=4096, rope_theta=1e7, norm_eps=1e-6, lin_k_heads=2,
                         lin_v_heads=4, lin_dim=16),
}
DTYPES = {"bf16": ("BF16", 2, "bfloat16"), "f16": ("F16", 2, "float16"), "f32": ("F32", 4, "float32")}
CHUNK = 1 << 22  # values drawn at a time
MXFP4_BLOCK = 32  # values per block (OCP MX v1.0): 16 bytes of E2M1 codes, one E8M0 scale byte
# The scales' exponents (E8M0 bytes): 2^-8 .. 2^-6 times codes of RMS 2.9.
MXFP4_SCALE_BYTES = (119, 120, 121)
# The published quantization_config (openai/gpt-oss-20b config.json).
QUANTIZATION_CONFIG = {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                  "model.embed_tokens", "lm_head"],
                       "quant_method": "mxfp4"}
GPT_OSS_VOCAB = 201088
# o200k_harmony's named special tokens from id 199998 on (None: <|reserved_ID|>).
HARMONY_SPECIALS = ["<|startoftext|>", "<|endoftext|>", None, None, "<|return|>", "<|constrain|>", None,
                    "<|channel|>", "<|start|>", "<|end|>", "<|message|>", None, None, None, "<|call|>", None]
HARMONY_FIRST = 199998


def tensors(s):
    """(name, shape, kind) in the order written; kind "norm" is all ones, "sink" the sink logits."""
    if s["family"] == "gpt_oss":
        return gpt_oss_tensors(s)
    if s["family"].startswith("qwen3_5"):
        return qwen35_tensors(s)
    d, hd = s["dim"], s["dim"] // s["heads"]
    out = [("model.embed_tokens.weight", (s["vocab"], d), "w")]
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        out.append((p + "input_layernorm.weight", (d,), "norm"))
        if s["family"] == "phi3":
            out.append((p + "self_attn.qkv_proj.weight", ((s["heads"] + 2 * s["kv_heads"]) * hd, d), "w"))
        else:
            out += [(p + "self_attn.q_proj.weight", (s["heads"] * hd, d), "w"),
                    (p + "self_attn.k_proj.weight", (s["kv_heads"] * hd, d), "w"),
                    (p + "self_attn.v_proj.weight", (s["kv_heads"] * hd, d), "w")]
        out += [(p + "self_attn.o_proj.weight", (d, s["heads"] * hd), "w"),
                (p + "post_attention_layernorm.weight", (d,), "norm")]
        if s["family"] == "phi3":
            out.append((p + "mlp.gate_up_proj.weight", (2 * s["ffn"], d), "w"))
        else:
            out += [(p + "mlp.gate_proj.weight", (s["ffn"], d), "w"),
                    (p + "mlp.up_proj.weight", (s["ffn"], d), "w")]
        out.append((p + "mlp.down_proj.weight", (d, s["ffn"]), "w"))
    out.append(("model.norm.weight", (d,), "norm"))
    if not s.get("tie"):
        out.append(("lm_head.weight", (s["vocab"], d), "w"))
    return out


# --plant-p0-circuit B: a P0 sink circuit written into the random weights, the paper's mechanism at
# a real shape (arXiv 2603.06591: an MLP in the first blocks amplifies position 0's hidden state
# into a fixed high-norm direction that later heads key on). Residual dimensions: MARK is large on
# the BOS token's embedding only, CONST on every token's; block B's MLP hidden unit 0 reads MARK
# (gate and up) and its down projection writes a large value into MASS, so only a position holding
# BOS gets a massive activation; in every block after B, each head's query reads CONST and its key
# reads MASS in the rotary dimension of lowest frequency (rotate_half pairs i and i + head_dim/2,
# angle position * theta^(-2i/head_dim): at i = head_dim/2 - 1 it stays below 0.01 rad over
# thousands of positions), so every query attends to the amplified position. The rest stays
# random. The circuit is mlp.B: mean-ablating it at position 0 removes the sink in blocks > B.
MARK, MASS, CONST = 0, 1, 2
BOS_ID = 1


def plant_edits(s, block):
    """{tensor name: [(rows, col, value)]}: rows a list (or None: every row), col an index or
    None (the whole row); applied in order, so a row is zeroed before its one entry is set."""
    hd = s["dim"] // s["heads"]
    r = hd // 2 - 1
    edits = {"model.embed_tokens.weight": [(None, CONST, 20.0), ([BOS_ID], MARK, 20.0)]}
    p = f"model.layers.{block}.mlp."
    edits[p + "gate_proj.weight"] = [([0], None, 0.0), ([0], MARK, 1.0)]
    edits[p + "up_proj.weight"] = [([0], None, 0.0), ([0], MARK, 1.0)]
    edits[p + "down_proj.weight"] = [(None, 0, 0.0), ([MASS], 0, 10.0)]
    for i in range(block + 1, s["layers"]):
        p = f"model.layers.{i}.self_attn."
        q_rows = [h * hd + r for h in range(s["heads"])]
        k_rows = [h * hd + r for h in range(s["kv_heads"])]
        edits[p + "q_proj.weight"] = [(q_rows, None, 0.0), (q_rows, CONST, 1.0)]
        edits[p + "k_proj.weight"] = [(k_rows, None, 0.0), (k_rows, MASS, 1.0)]
    return edits


def apply_edits(x, row0, edits):
    """x: rows row0.. of a tensor, (rows, cols), edited in place."""
    for rows, col, value in edits:
        sel = (slice(None) if rows is None else
               [i - row0 for i in rows if row0 <= i < row0 + x.shape[0]])
        if col is None:
            x[sel, :] = value
        else:
            x[sel, col] = value


def gpt_oss_tensors(s):
    """transformers' GptOssForCausalLM state dict (modeling_gpt_oss.py), the experts as stored in the
    published checkpoints (MXFP4 blocks + scales) or, with --expert-dtype, unquantised."""
    d, hd, e, f = s["dim"], s["head_dim"], s["experts"], s["ffn"]
    q, kv = s["heads"] * hd, s["kv_heads"] * hd
    out = [("model.embed_tokens.weight", (s["vocab"], d), "w")]
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (d,), "norm"),
                (p + "self_attn.q_proj.weight", (q, d), "w"), (p + "self_attn.q_proj.bias", (q,), "w"),
                (p + "self_attn.k_proj.weight", (kv, d), "w"), (p + "self_attn.k_proj.bias", (kv,), "w"),
                (p + "self_attn.v_proj.weight", (kv, d), "w"), (p + "self_attn.v_proj.bias", (kv,), "w"),
                (p + "self_attn.o_proj.weight", (d, q), "w"), (p + "self_attn.o_proj.bias", (d,), "w"),
                (p + "self_attn.sinks", (s["heads"],), "sink"),
                (p + "post_attention_layernorm.weight", (d,), "norm"),
                (p + "mlp.router.weight", (e, d), "w"), (p + "mlp.router.bias", (e,), "w")]
        if s["expert_dtype"] == "mxfp4":
            # (out, in) rows of in / 32 blocks: gate_up's rows interleave gate (even) and up (odd).
            out += [(p + "mlp.experts.gate_up_proj_blocks", (e, 2 * f, d // MXFP4_BLOCK, 16), "blocks"),
                    (p + "mlp.experts.gate_up_proj_scales", (e, 2 * f, d // MXFP4_BLOCK), "scales"),
                    (p + "mlp.experts.down_proj_blocks", (e, d, f // MXFP4_BLOCK, 16), "blocks"),
                    (p + "mlp.experts.down_proj_scales", (e, d, f // MXFP4_BLOCK), "scales")]
        else:
            out += [(p + "mlp.experts.gate_up_proj", (e, d, 2 * f), "expert"),
                    (p + "mlp.experts.down_proj", (e, f, d), "expert")]
        out += [(p + "mlp.experts.gate_up_proj_bias", (e, 2 * f), "w"),
                (p + "mlp.experts.down_proj_bias", (e, d), "w")]
    out += [("model.norm.weight", (d,), "norm"), ("lm_head.weight", (s["vocab"], d), "w")]
    return out


def qwen35_tensors(s):
    """Qwen3.5 / Qwen3.6 as the Hub ships them (docs/specs/qwen3_next.md section 2.2): the language
    model under model.language_model.*, Gated DeltaNet layers (linear_attn.*) where (i + 1) % 4 != 0,
    gated attention (q_proj holds per head [query | gate]) on the others; their 1 + w norms are
    zeros ("zero"), A_log and the gated norm F32 as the real checkpoints keep them; MoE experts
    fused (experts.gate_up_proj (E, 2F, D), experts.down_proj (E, D, F)) with a gated shared expert."""
    d, hd, H, Hkv = s["dim"], s["head_dim"], s["heads"], s["kv_heads"]
    nk, nv, dk = s["lin_k_heads"], s["lin_v_heads"], s["lin_dim"]
    kd, vd = nk * dk, nv * dk
    pre = "model.language_model."
    out = [(pre + "embed_tokens.weight", (s["vocab"], d), "w")]
    for i in range(s["layers"]):
        p = f"{pre}layers.{i}."
        out.append((p + "input_layernorm.weight", (d,), "zero"))
        if (i + 1) % 4 != 0:
            la = p + "linear_attn."
            out += [(la + "in_proj_qkv.weight", (2 * kd + vd, d), "w"), (la + "in_proj_z.weight", (vd, d), "w"),
                    (la + "in_proj_b.weight", (nv, d), "w"), (la + "in_proj_a.weight", (nv, d), "w"),
                    (la + "conv1d.weight", (2 * kd + vd, 1, 4), "w"), (la + "dt_bias", (nv,), "norm"),
                    (la + "A_log", (nv,), "alog"), (la + "norm.weight", (dk,), "f32norm"),
                    (la + "out_proj.weight", (d, vd), "w")]
        else:
            sa = p + "self_attn."
            out += [(sa + "q_proj.weight", (2 * H * hd, d), "w"), (sa + "k_proj.weight", (Hkv * hd, d), "w"),
                    (sa + "v_proj.weight", (Hkv * hd, d), "w"), (sa + "o_proj.weight", (d, H * hd), "w"),
                    (sa + "q_norm.weight", (hd,), "zero"), (sa + "k_norm.weight", (hd,), "zero")]
        out.append((p + "post_attention_layernorm.weight", (d,), "zero"))
        m, f = p + "mlp.", s["ffn"]
        if s["family"] == "qwen3_5":
            out += [(m + "gate_proj.weight", (f, d), "w"), (m + "up_proj.weight", (f, d), "w"),
                    (m + "down_proj.weight", (d, f), "w")]
        else:
            e, fs = s["experts"], s["shared_ffn"]
            out += [(m + "gate.weight", (e, d), "w"), (m + "experts.gate_up_proj", (e, 2 * f, d), "w"),
                    (m + "experts.down_proj", (e, d, f), "w"),
                    (m + "shared_expert.gate_proj.weight", (fs, d), "w"),
                    (m + "shared_expert.up_proj.weight", (fs, d), "w"),
                    (m + "shared_expert.down_proj.weight", (d, fs), "w"),
                    (m + "shared_expert_gate.weight", (1, d), "w")]
    out.append((pre + "norm.weight", (d,), "zero"))
    if not s.get("tie"):
        out.append(("lm_head.weight", (s["vocab"], d), "w"))
    return out


def encode(x, dtype):
    if dtype == "f32":
        return x.astype("<f4").tobytes()
    if dtype == "f16":
        return x.astype("<f2").tobytes()
    bits = x.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return rounded.astype("<u2").tobytes()


def stored(kind, dtype, expert_dtype):
    """(safetensors dtype, bytes a value) of a tensor of this kind."""
    if kind in ("blocks", "scales"):
        return "U8", 1
    if kind == "expert" and expert_dtype != "mxfp4":
        return DTYPES[expert_dtype][:2]
    if kind in ("alog", "f32norm"):
        return DTYPES["f32"][:2]
    return DTYPES[dtype][:2]


def tensor_bytes(t, dtype, expert_dtype):
    return int(np.prod(t[1])) * stored(t[2], dtype, expert_dtype)[1]


def write_shard(path, items, dtype, rng, sink_logit, expert_dtype="mxfp4", edits=None):
    header, offset = {}, 0
    for t in items:
        n = tensor_bytes(t, dtype, expert_dtype)
        header[t[0]] = {"dtype": stored(t[2], dtype, expert_dtype)[0], "shape": list(t[1]),
                        "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt", "generator": "sinkscope scripts/make_test_model.py"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for tname, shape, kind in items:
            left = int(np.prod(shape))
            mine = (edits or {}).get(tname)
            cols = shape[-1]
            row0 = 0
            while left:
                n = min(left, CHUNK)
                if mine:  # whole rows, so that the edits know which rows they see
                    n = min(left, max(cols, CHUNK // cols * cols))
                if kind == "blocks":  # E2M1 code pairs: every byte value
                    f.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
                    left -= n
                    continue
                if kind == "scales":
                    f.write(rng.choice(np.array(MXFP4_SCALE_BYTES, np.uint8), n).tobytes())
                    left -= n
                    continue
                if kind in ("norm", "f32norm"):
                    x = np.ones(n, np.float32)
                elif kind == "zero":
                    x = np.zeros(n, np.float32)
                elif kind == "alog":  # log of decay rates in [1, 16], as the family initialises A
                    x = np.log(rng.uniform(1, 16, n)).astype(np.float32)
                elif kind == "sink":
                    x = (np.full(n, sink_logit, np.float32) if sink_logit is not None
                         else rng.normal(0, 1, n).astype(np.float32))
                else:
                    x = rng.normal(0, 0.02, n).astype(np.float32)
                if mine:
                    x = x.reshape(-1, cols)
                    apply_edits(x, row0, mine)
                    row0 += x.shape[0]
                    x = x.reshape(-1)
                f.write(encode(x, expert_dtype if kind == "expert" else
                               "f32" if kind in ("alog", "f32norm") else dtype))
                left -= n
    return offset


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: byte b -> a printable character (the printable Latin-1 bytes
    stand for themselves, the others are moved to U+0100 on), as byte-level BPE vocabularies spell
    their pieces."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def harmony_specials(vocab):
    """{id: content} of the harmony special tokens in a vocabulary of `vocab` ids (see the top)."""
    first = HARMONY_FIRST if vocab >= GPT_OSS_VOCAB else vocab - len(HARMONY_SPECIALS)
    out = {}
    for i, name in enumerate(HARMONY_SPECIALS):
        out[first + i] = name or f"<|reserved_{HARMONY_FIRST + i}|>"
    if vocab >= GPT_OSS_VOCAB:
        for i in range(HARMONY_FIRST + len(HARMONY_SPECIALS), vocab):
            out[i] = f"<|reserved_{i}|>"
    return out


def write_tokenizer(path, vocab):
    """A byte-level BPE tokenizer.json of `vocab` ids (see the top): the 256 bytes, synthetic
    merges up to the first special id, then the harmony special tokens."""
    specials = harmony_specials(vocab)
    regular = min(specials)
    if regular < 256 + 1:
        sys.exit(f"make_test_model: a vocabulary of {vocab} leaves no room for the 256 bytes and the "
                 f"{len(specials)} harmony tokens; give --vocab {256 + 1 + len(HARMONY_SPECIALS)} or more")
    byte_char = bytes_to_unicode()
    pieces = [byte_char[b] for b in range(256)]
    merges = []
    # The alphabet merges draw from: space first, then letters roughly by English frequency,
    # digits and punctuation; the space (GPT-2's "Ġ") only starts a piece, as the o200k split
    # only puts a space at the start of a word.
    order = (" etaoinshrdlcumwfgypbvkjxqzETAOINSHRDLCUMWFGYPBVKJXQZ0123456789"
             ".,'\"-!?:;()[]{}/\\_*&%$#@+=<>|^~`")
    alphabet = [byte_char[ord(c)] for c in order]
    tails = alphabet[1:]
    seen = set(pieces)

    def add(left, right):
        piece = left + right
        if piece in seen or len(pieces) >= regular:
            return
        seen.add(piece)
        pieces.append(piece)
        merges.append([left, right])

    for a in alphabet:  # two characters
        for b in tails:
            add(a, b)
    level = [p for p in pieces if len(p) == 2]
    while len(pieces) < regular and level:  # then one more character at a time
        longer = []
        for prefix in level:
            for b in tails:
                add(prefix, b)
                longer.append(prefix + b)
                if len(pieces) >= regular:
                    break
            if len(pieces) >= regular:
                break
        level = longer
    if len(pieces) < regular:
        sys.exit("make_test_model: could not fill the vocabulary")  # not reached: 94^k grows fast
    pattern = json.loads((pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "tokenizers"
                          / "o200k_pretokenize.json").read_text())["pattern"]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, c in sorted(specials.items())],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": True, "vocab": {p: i for i, p in enumerate(pieces)}, "merges": merges},
    }
    path.write_text(json.dumps(tokenizer, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    return specials


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS))
    for k in ("layers", "dim", "heads", "kv_heads", "ffn", "vocab", "ctx"):
        ap.add_argument("--" + k.replace("_", "-"), type=int)
    ap.add_argument("--rope-theta", type=float)
    ap.add_argument("--norm-eps", type=float)
    ap.add_argument("--family", choices=["llama", "gpt_oss", "phi3", "qwen3_5", "qwen3_5_moe"])
    ap.add_argument("--partial-rotary", type=float, help="phi3: partial_rotary_factor")
    for k in ("head_dim", "experts", "top_k", "window"):
        ap.add_argument("--" + k.replace("_", "-"), type=int)
    ap.add_argument("--sink-logit", type=float, help="gpt_oss: every head's sink logit")
    ap.add_argument("--expert-dtype", choices=["mxfp4"] + sorted(DTYPES), default="mxfp4",
                    help="gpt_oss: the experts in MXFP4 blocks + scales as published (default), or unquantised")
    ap.add_argument("--no-tokenizer", action="store_true", help="gpt_oss: write no tokenizer.json")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--shard-gb", type=float, default=4.0, help="largest shard (GB)")
    ap.add_argument("--plant-p0-circuit", type=int, metavar="BLOCK",
                    help="llama: write a P0 sink circuit with its amplifier MLP in block BLOCK")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    s = dict(PRESETS[a.preset]) if a.preset else dict(ctx=2048, rope_theta=10000.0, norm_eps=1e-5)
    for k in ("layers", "dim", "heads", "kv_heads", "ffn", "vocab", "ctx", "rope_theta", "norm_eps",
              "family", "head_dim", "experts", "top_k", "window"):
        if getattr(a, k) is not None:
            s[k] = getattr(a, k)
    s.setdefault("kv_heads", s.get("heads"))
    s.setdefault("family", "llama")
    s["expert_dtype"] = a.expert_dtype
    required = ["layers", "dim", "heads", "ffn", "vocab"]
    if s["family"] == "gpt_oss":
        required += ["head_dim", "experts", "top_k", "window"]
    elif a.sink_logit is not None:
        sys.exit("make_test_model: --sink-logit needs --family gpt_oss")
    if s["family"].startswith("qwen3_5") and not a.preset:
        sys.exit("make_test_model: the qwen3_5 families are made from a preset (qwen3.5-0.8b, "
                 "qwen3.6-35b-a3b, qwen3.5-tiny); shape flags may then change it")
    missing = [k for k in required if s.get(k) is None]
    if missing:
        sys.exit(f"make_test_model: give --preset or every shape flag (missing: {', '.join(missing)})")
    if a.plant_p0_circuit is not None and (s["family"] != "llama" or
                                           not 0 <= a.plant_p0_circuit < s["layers"] - 1 or
                                           s["dim"] < 3 or s["vocab"] <= BOS_ID):
        sys.exit("make_test_model: --plant-p0-circuit needs the llama family and a block before the last")
    if a.partial_rotary is not None and s["family"] != "phi3":
        sys.exit("make_test_model: --partial-rotary needs --family phi3")
    if (s["family"] in ("llama", "phi3") and s["dim"] % s["heads"]) or s["heads"] % s["kv_heads"]:
        sys.exit("make_test_model: dim must be a multiple of heads, and heads of kv-heads")
    if s["family"] == "gpt_oss" and a.expert_dtype == "mxfp4" and (s["dim"] % MXFP4_BLOCK or s["ffn"] % MXFP4_BLOCK):
        sys.exit(f"make_test_model: MXFP4 experts need dim and ffn in whole {MXFP4_BLOCK}-value blocks "
                 f"(got {s['dim']} and {s['ffn']}); give --expert-dtype bf16")
    if s["family"] == "gpt_oss" and not a.no_tokenizer and s["vocab"] < 256 + 1 + len(HARMONY_SPECIALS):
        sys.exit(f"make_test_model: the tokenizer needs --vocab {256 + 1 + len(HARMONY_SPECIALS)} or more "
                 "(the 256 bytes and the harmony tokens), or --no-tokenizer")

    # Shard names hold 5 digits, as the Hub's do; gpt-oss numbers its shards from 0, "of" the
    # last number (model-00000-of-00002 .. model-00002-of-00002), the other families from 1.
    if not (a.shard_gb > 0 and math.isfinite(a.shard_gb)):
        sys.exit(f"make_test_model: --shard-gb must be a positive size in GB, got {a.shard_gb}")

    out = pathlib.Path(a.out)
    if out.exists():
        sys.exit(f"make_test_model: {out} exists; remove it first")
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    tmp.mkdir(parents=True)
    try:
        items = tensors(s)
        limit = int(a.shard_gb * 1e9)
        shards, cur, size = [], [], 0
        for t in items:
            n = tensor_bytes(t, a.dtype, a.expert_dtype)
            if cur and size + n > limit:
                shards.append(cur)
                cur, size = [], 0
            cur.append(t)
            size += n
        shards.append(cur)
        if len(shards) > 99999:
            sys.exit(f"make_test_model: --shard-gb {a.shard_gb} makes {len(shards)} shards, more than "
                     "five-digit shard names hold")
        rng = np.random.Generator(np.random.PCG64(a.seed))
        total, weight_map = 0, {}
        for i, group in enumerate(shards):
            if len(shards) == 1:
                fname = "model.safetensors"
            elif s["family"] == "gpt_oss":  # as published: numbered from 0, "of" the last number
                fname = f"model-{i:05d}-of-{len(shards) - 1:05d}.safetensors"
            else:
                fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            edits = plant_edits(s, a.plant_p0_circuit) if a.plant_p0_circuit is not None else None
            total += write_shard(tmp / fname, group, a.dtype, rng, a.sink_logit, a.expert_dtype, edits)
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
            "tie_word_embeddings": bool(s.get("tie")), "bos_token_id": 1, "eos_token_id": 2,
            "torch_dtype": DTYPES[a.dtype][2],
        }
        if s.get("rope_scaling"):
            config["rope_scaling"] = s["rope_scaling"]
        if s["family"] == "gpt_oss":
            # gpt-oss's config.json keys (GptOssConfig); YaRN as the published checkpoints.
            original = min(4096, s["ctx"])
            config.update({
                "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
                "head_dim": s["head_dim"], "attention_bias": True,
                "num_local_experts": s["experts"], "num_experts_per_tok": s["top_k"],
                "swiglu_limit": 7.0, "sliding_window": s["window"],
                "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention"
                                for i in range(s["layers"])],
                "rope_scaling": {"rope_type": "yarn", "factor": s["ctx"] / original,
                                 "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                 "original_max_position_embeddings": original},
                "experts_per_token": s["top_k"], "initial_context_length": original,
                "router_aux_loss_coef": 0.9, "output_router_logits": False, "attention_dropout": 0.0,
                "bos_token_id": None, "eos_token_id": None})
            if a.expert_dtype == "mxfp4":
                config["quantization_config"] = QUANTIZATION_CONFIG
            if not a.no_tokenizer:
                # eos <|return|> and pad <|endoftext|>, as the published config.json (ids of the
                # tokenizer written here: the published ones at gpt-oss's vocabulary size).
                specials = write_tokenizer(tmp / "tokenizer.json", s["vocab"])
                ids = {c: i for i, c in specials.items()}
                config.update({"eos_token_id": ids["<|return|>"], "pad_token_id": ids["<|endoftext|>"]})
        if s["family"] == "phi3":
            # Phi3Config's keys (Phi-3-mini's config.json).
            config.update({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
                           "sliding_window": s.get("window"), "eos_token_id": 32000,
                           "partial_rotary_factor": a.partial_rotary or 1.0})
        if s["family"].startswith("qwen3_5"):
            # An image-text config as the Hub ships it: the language model under text_config.
            moe = s["family"] == "qwen3_5_moe"
            text = {"model_type": s["family"] + "_text", "hidden_size": s["dim"],
                    "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
                    "num_key_value_heads": s["kv_heads"], "head_dim": s["head_dim"],
                    "vocab_size": s["vocab"], "max_position_embeddings": s["ctx"],
                    "rms_norm_eps": s["norm_eps"], "hidden_act": "silu",
                    "rope_parameters": {"rope_type": "default", "rope_theta": s["rope_theta"],
                                        "partial_rotary_factor": 0.25,
                                        "mrope_section": [11, 11, 10] if s["head_dim"] == 256 else
                                        [s["head_dim"] // 8, 0, 0], "mrope_interleaved": True},
                    "partial_rotary_factor": 0.25, "full_attention_interval": 4,
                    "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                                    for i in range(s["layers"])],
                    "linear_conv_kernel_dim": 4, "linear_key_head_dim": s["lin_dim"],
                    "linear_value_head_dim": s["lin_dim"], "linear_num_key_heads": s["lin_k_heads"],
                    "linear_num_value_heads": s["lin_v_heads"], "attn_output_gate": True,
                    "mamba_ssm_dtype": "float32", "mtp_num_hidden_layers": 1,
                    "tie_word_embeddings": bool(s.get("tie")), "bos_token_id": None,
                    "eos_token_id": 248044 if s["vocab"] > 248044 else None,
                    "dtype": DTYPES[a.dtype][2]}
            if moe:
                text.update({"num_experts": s["experts"], "num_experts_per_tok": s["top_k"],
                             "moe_intermediate_size": s["ffn"],
                             "shared_expert_intermediate_size": s["shared_ffn"]})
            else:
                text["intermediate_size"] = s["ffn"]
            cls = "Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"
            config = {"architectures": [cls], "model_type": s["family"], "text_config": text,
                      "vision_config": {"depth": 12, "hidden_size": 768}, "image_token_id": 248056,
                      "tie_word_embeddings": bool(s.get("tie"))}
        (tmp / "config.json").write_text(json.dumps(config, indent=1) + "\n")
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    per_value = {"blocks": 2, "scales": 0}  # a block byte holds two weights; scales hold none
    params = sum(int(np.prod(t[1])) * per_value.get(t[2], 1) for t in items)
    experts = " and MXFP4 experts" if s["family"] == "gpt_oss" and a.expert_dtype == "mxfp4" else ""
    print(f"{out}: {params / 1e6:,.2f} M parameters, {total / 1e6:,.1f} MB of {a.dtype}{experts} in "
          f"{len(shards)} shard(s)", file=sys.stderr)


if __name__ == "__main__":
    main()
