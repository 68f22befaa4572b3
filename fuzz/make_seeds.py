#!/usr/bin/env python3
"""Writes the small seed files under fuzz/seeds/ for the targets that have no hand-made ones.

Run from anywhere: python3 fuzz/make_seeds.py. The outputs are committed; rerun after changing a
format. Each seed is a valid input of a few hundred bytes, so the fuzzer starts past the checks.
"""
import json
import os
import re
import struct

ROOT = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(ROOT, "seeds")


def write(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def floats(n, start=0.0):
    return struct.pack(f"<{n}f", *[start + 0.01 * i for i in range(n)])


# ---- llama2.c model (.bin): dim 4, hidden 8, 1 layer, 2 heads, 1 kv head, vocab 8, seq_len 4.
D, F, L, H, KV_HEADS, V, T = 4, 8, 1, 2, 1, 8, 4
DH = D // H
KV = KV_HEADS * DH
body = V * D + 2 * L * D + 2 * L * D * D + 2 * L * KV * D + 3 * L * D * F + D
for shared in (True, False):
    n = body + T * DH + (0 if shared else V * D)
    header = struct.pack("<7i", D, F, L, H, KV_HEADS, V if shared else -V, T)
    write("fuzz_llama2c", f"legacy_{'shared' if shared else 'unshared'}.bin", header + floats(n))
    n = body + (0 if shared else V * D)
    v1 = struct.pack("<Ii7iB", 0x616B3432, 1, D, F, L, H, KV_HEADS, V, T, 1 if shared else 0)
    v1 += b"\0" * (256 - len(v1))
    write("fuzz_llama2c", f"v1_{'shared' if shared else 'unshared'}.bin", v1 + floats(n))

# ---- llama2.c tokenizer.bin; the first byte is vocab_size - 1 (see fuzz_llama2c_tokenizer.cpp).
pieces = ["<unk>", "<s>", "</s>", " ", "a", "b", "c", "ab", " a", " ab", "ba", "\xc3\xa9", "12", "1"]
tok = struct.pack("<i", 8)
for i, p in enumerate(pieces):
    b = p.encode("latin-1")
    tok += struct.pack("<fi", -float(i), len(b)) + b
write("fuzz_llama2c_tokenizer", "small.bin", bytes([len(pieces) - 1]) + tok)
write("fuzz_llama2c_tokenizer", "too_few.bin", bytes([len(pieces) + 3]) + tok)

# ---- config.json, one per family: the examples of tests/test_hf_config.cpp.
src = open(os.path.join(ROOT, "..", "tests", "test_hf_config.cpp")).read()
for name, text in re.findall(r'constexpr const char\* k(\w+) = R"\((\{.*?\})\)";', src, re.S):
    write("fuzz_hf_config", f"{name.lower()}.json", text)

# ---- model.safetensors.index.json (the shards are written by the target itself).
write("fuzz_safetensors_index", "index.json", json.dumps(
    {"metadata": {"total_size": 42}, "weight_map": {"x": "a.safetensors", "y": "a.safetensors",
                                                   "z": "b.safetensors"}}, indent=1))
write("fuzz_safetensors_index", "missing.json", json.dumps(
    {"weight_map": {"x": "b.safetensors", "w": "c.safetensors"}}))

# ---- train config.
write("fuzz_train_config", "quick.json", json.dumps({"preset": "quick", "steps": 10, "comment": "x"}))
write("fuzz_train_config", "moe.json", json.dumps({"preset": "moe-quick", "rope": "interleaved"}))
write("fuzz_train_config", "full.json", json.dumps({
    "dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "hidden_dim": 0, "vocab_size": 64,
    "tied_embeddings": False, "norm_eps": 1e-5, "rope_theta": 10000.0, "rope": "half",
    "qk_norm": True, "n_experts": 0, "n_experts_per_tok": 2, "data": "text",
    "corpus": "c.txt", "tokenizer": "", "batch_size": 4, "seq_len": 16, "steps": 5,
    "lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 1, "beta1": 0.9, "beta2": 0.95,
    "weight_decay": 0.1, "grad_clip": 1.0, "seed": 7, "eval_every": 5, "eval_batches": 1,
    "checkpoint_every": 5, "threads": 1, "out": "runs/x"}, indent=1))

# ---- trainer_state.json (as SaveCheckpoint writes it).
write("fuzz_trainer_state", "state.json", json.dumps({
    "step": 100, "adam_t": 100, "tokens_seen": 102400, "parameters": 1234,
    "rng": ["0123456789abcdef", "fedcba9876543210", "00000000000000ff", "8000000000000000"]},
    indent=1))
write("fuzz_trainer_state", "global_step.json", json.dumps({"global_step": 7}))

# ---- --tokens: the first byte is the vocabulary size (255: 2^30).
write("fuzz_token_ids", "ids.txt", b"\x40" + b"1 2 3\n4\t5 63\r\n0\n")
write("fuzz_token_ids", "bad.txt", b"\xff" + b"12 999999999\n7 x 1")

# ---- --patterns, --ablate, --conditions.
for i, spec in enumerate(["0:3,1:*", "11:11,0:0", "mlp.1,head.0.3", "head.11.11,mlp.0",
                          "bos,no-bos,random-p0,repeat", "no-bos"]):
    write("fuzz_flag_specs", f"spec{i}.txt", spec)

# ---- trace cache entry (ProfileJson) and an MPI gather result (ResultJson).
profile = {"n_layers": 2, "n_heads": 4, "sink_rate": [0.25, 0.75], "alpha0": [0.2, 0.6],
           "alpha1": [0.1, 0.05], "other_top_share": [0.0, 0.25], "p0_norm_ratio": [1.5, 4.0],
           "other_sink_share": 0.05, "alpha1_share": 0.0, "onset_layer": 1,
           "amplification_layer": 1, "loss": 2.5}
write("fuzz_trace_cache", "profile.json", json.dumps(profile, indent=1))
write("fuzz_trace_cache", "result.json", json.dumps(
    {"path": "run/step-100", "step": 100, "step_source": "trainer_state.json", "ok": True,
     "profile": profile}))
write("fuzz_trace_cache", "failed.json", json.dumps(
    {"path": "run/step-5", "step": 5, "step_source": "name", "ok": False, "error": "x"}))


# ---- SentencePiece tokenizer.model: a hand-serialised ModelProto (sentencepiece_model.proto):
#   1 pieces {1 piece, 2 score (float), 3 type}, 2 trainer_spec {3 model_type (2 = BPE),
#   35 byte_fallback}, 3 normalizer_spec {1 name, 3 add_dummy_prefix, 4 remove_extra_whitespaces}.
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def field(num, wire, payload):
    key = varint(num << 3 | wire)
    if wire == 0:
        return key + varint(payload)
    if wire == 5:
        return key + payload
    return key + varint(len(payload)) + payload


def spm_model(pieces, byte_fallback):
    out = b""
    for piece, score, kind in pieces:
        out += field(1, 2, field(1, 2, piece.encode()) + field(2, 5, struct.pack("<f", score)) +
                     field(3, 0, kind))
    trainer = field(3, 0, 2) + field(35, 0, 1 if byte_fallback else 0)
    trainer += field(40, 0, 0) + field(41, 0, 1) + field(42, 0, 2) + field(43, 0, 2**64 - 1)
    out += field(2, 2, trainer)
    out += field(3, 2, field(1, 2, b"identity") + field(3, 0, 1) + field(4, 0, 0))
    return out


NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6
base = [("<unk>", 0.0, UNKNOWN), ("<s>", 0.0, CONTROL), ("</s>", 0.0, CONTROL)]
words = [("\u2581", -1.0, NORMAL), ("a", -2.0, NORMAL), ("b", -3.0, NORMAL),
         ("\u2581a", -4.0, NORMAL), ("ab", -5.0, NORMAL), ("\u2581ab", -6.0, NORMAL)]
write("fuzz_sentencepiece", "small.model", spm_model(base + words, False))
bytes_pieces = [(f"<0x{b:02X}>", 0.0, BYTE) for b in range(256)]
write("fuzz_sentencepiece", "byte_fallback.model", spm_model(base + bytes_pieces + words, True))
