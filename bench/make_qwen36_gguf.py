#!/usr/bin/env python3
"""Write a random Qwen3.6-35B-A3B-shaped GGUF (llama.cpp's qwen35moe) in Q4_K, tensor by tensor.

The 35B shape in BF16 is about 70 GB, more than this machine's disk holds, so the benchmark's
model is written straight into Q4_K: every block's quants and 6-bit scales are random bytes, its
super-block scale d and min dmin fixed (dmin = 7.5 d, so that the values average about zero),
which decodes to weights of about +-0.02 (ggml's Q4_K: 256 values per block of 144 bytes,
value = d * scale * q - dmin * min). Norms, the DeltaNet's A (stored as -exp(A_log)), dt bias and
convolution, the routers and the shared experts' gates are F32, as llama.cpp's files keep them.
The shape is the qwen3.6-35b-a3b preset of scripts/make_test_model.py; the names and keys are
llama.cpp's (docs/specs/qwen3_next.md section 8). The vocabulary: llama2.c's tok512.bin
(--tokenizer) padded with unused pieces to the model's 248,320 ids, so that chat can run.

    python3 bench/make_qwen36_gguf.py --out /tmp/q36.gguf --tokenizer models/stories260K/tok512.bin
"""
import argparse
import struct
import sys

import numpy as np

SHAPE = dict(layers=40, dim=2048, heads=16, kv_heads=2, head_dim=256, rot=64, experts=256, top_k=8,
             ffn=512, shared_ffn=512, vocab=248320, ctx=262144, lin_k_heads=16, lin_v_heads=32,
             lin_dim=128, conv=4, interval=4)
F32, Q4_K = 0, 12
Q4K_BLOCK, Q4K_BYTES = 256, 144
ALIGN = 32


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


class Writer:
    def __init__(self):
        self.kv = []
        self.tensors = []  # (name, ne, type, nbytes, fill)

    def u32(self, k, v):
        self.kv.append(gguf_string(k) + struct.pack("<II", 4, v))

    def f32(self, k, v):
        self.kv.append(gguf_string(k) + struct.pack("<If", 6, v))

    def string(self, k, v):
        self.kv.append(gguf_string(k) + struct.pack("<I", 8) + gguf_string(v))

    def array(self, k, elem_type, values, fmt=None):
        body = struct.pack("<IIQ", 9, elem_type, len(values))
        if elem_type == 8:
            body += b"".join(gguf_string(v) for v in values)
        else:
            body += np.asarray(values, dtype=fmt).tobytes()
        self.kv.append(gguf_string(k) + body)

    def tensor(self, name, ne, ggml_type, fill):
        n = int(np.prod(ne))
        nbytes = n * 4 if ggml_type == F32 else n // Q4K_BLOCK * Q4K_BYTES
        self.tensors.append((name, ne, ggml_type, nbytes, fill))

    def write(self, path, rng):
        header = b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)) + b"".join(self.kv)
        offset = 0
        infos = []
        for name, ne, t, nbytes, _ in self.tensors:
            infos.append(gguf_string(name) + struct.pack("<I", len(ne)) +
                         struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", t, offset))
            offset += (nbytes + ALIGN - 1) // ALIGN * ALIGN
        header += b"".join(infos)
        header += b"\0" * (-len(header) % ALIGN)
        total = len(header) + offset
        with open(path, "wb") as f:
            f.write(header)
            done = 0
            for i, (name, ne, t, nbytes, fill) in enumerate(self.tensors):
                if t == F32:
                    f.write(np.asarray(fill(int(np.prod(ne))), dtype="<f4").tobytes())
                else:
                    q4k_random(f, nbytes, rng)
                f.write(b"\0" * (-nbytes % ALIGN))
                done += nbytes
                if sys.stderr.isatty():
                    print(f"\r{done / 1e9:6.2f} / {total / 1e9:.2f} GB", end="", file=sys.stderr)
        if sys.stderr.isatty():
            print(file=sys.stderr)
        return total


D_HALF = np.float16(2e-5).tobytes()
DMIN_HALF = np.float16(1.5e-4).tobytes()


def q4k_random(f, nbytes, rng):
    blocks = nbytes // Q4K_BYTES
    step = (64 << 20) // Q4K_BYTES
    for b0 in range(0, blocks, step):
        n = min(step, blocks - b0)
        raw = rng.integers(0, 256, size=(n, Q4K_BYTES), dtype=np.uint8)
        raw[:, 0:2] = np.frombuffer(D_HALF, dtype=np.uint8)
        raw[:, 2:4] = np.frombuffer(DMIN_HALF, dtype=np.uint8)
        f.write(raw.tobytes())


def read_llama2c_tokenizer(path):
    with open(path, "rb") as f:
        data = f.read()
    (max_len,) = struct.unpack_from("<i", data, 0)
    at, pieces, scores = 4, [], []
    while at < len(data):
        score, n = struct.unpack_from("<fi", data, at)
        at += 8
        pieces.append(data[at:at + n].decode("utf-8", errors="replace"))
        scores.append(score)
        at += n
    return pieces, scores


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", required=True, help="a llama2.c tokenizer.bin (e.g. tok512.bin)")
    ap.add_argument("--layers", type=int, default=SHAPE["layers"])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    s = dict(SHAPE, layers=a.layers)
    rng = np.random.default_rng(a.seed)
    D, L, E, F, Fs, V = s["dim"], s["layers"], s["experts"], s["ffn"], s["shared_ffn"], s["vocab"]
    nk, nv, dk = s["lin_k_heads"], s["lin_v_heads"], s["lin_dim"]
    Kd, Vd = nk * dk, nv * dk
    H, Hkv, Dh = s["heads"], s["kv_heads"], s["head_dim"]
    w = Writer()
    p = "qwen35moe."
    w.string("general.architecture", "qwen35moe")
    w.string("general.name", "random Qwen3.6-35B-A3B shape")
    for k, v in [("block_count", L), ("context_length", s["ctx"]), ("embedding_length", D),
                 ("attention.head_count", H), ("attention.head_count_kv", Hkv),
                 ("attention.key_length", Dh), ("attention.value_length", Dh),
                 ("rope.dimension_count", s["rot"]), ("ssm.conv_kernel", s["conv"]),
                 ("ssm.state_size", dk), ("ssm.group_count", nk), ("ssm.time_step_rank", nv),
                 ("ssm.inner_size", Vd), ("expert_count", E), ("expert_used_count", s["top_k"]),
                 ("expert_feed_forward_length", F), ("expert_shared_feed_forward_length", Fs),
                 ("full_attention_interval", s["interval"])]:
        w.u32(p + k, v)
    w.f32(p + "attention.layer_norm_rms_epsilon", 1e-6)
    w.f32(p + "rope.freq_base", 1e7)
    w.array(p + "rope.dimension_sections", 5, [11, 11, 10, 0], "<i4")
    pieces, scores = read_llama2c_tokenizer(a.tokenizer)
    types = [2 if i == 0 else 3 if i < 3 else 6 if pieces[i].startswith("<0x") else 1
             for i in range(len(pieces))]
    pad = V - len(pieces)
    w.string("tokenizer.ggml.model", "llama")
    w.array("tokenizer.ggml.tokens", 8, pieces + [f"<unused_{i}>" for i in range(pad)])
    w.array("tokenizer.ggml.scores", 6, scores + [-1e9] * pad, "<f4")
    w.array("tokenizer.ggml.token_type", 5, types + [5] * pad, "<i4")
    w.u32("tokenizer.ggml.bos_token_id", 1)
    w.u32("tokenizer.ggml.eos_token_id", 2)

    ones = lambda n: np.ones(n)
    small = lambda std: (lambda n: rng.normal(0, std, n))
    w.tensor("token_embd.weight", [D, V], Q4_K, None)
    for l in range(L):
        b = f"blk.{l}."
        w.tensor(b + "attn_norm.weight", [D], F32, ones)
        w.tensor(b + "post_attention_norm.weight", [D], F32, ones)
        if (l + 1) % s["interval"]:
            w.tensor(b + "attn_qkv.weight", [D, 2 * Kd + Vd], Q4_K, None)
            w.tensor(b + "attn_gate.weight", [D, Vd], Q4_K, None)
            w.tensor(b + "ssm_beta.weight", [D, nv], F32, small(0.02))
            w.tensor(b + "ssm_alpha.weight", [D, nv], F32, small(0.02))
            w.tensor(b + "ssm_conv1d.weight", [s["conv"], 2 * Kd + Vd], F32, small(0.3))
            w.tensor(b + "ssm_dt.bias", [nv], F32, small(0.5))
            w.tensor(b + "ssm_a", [nv], F32, lambda n: -rng.uniform(1, 16, n))
            w.tensor(b + "ssm_norm.weight", [dk], F32, ones)
            w.tensor(b + "ssm_out.weight", [Vd, D], Q4_K, None)
        else:
            w.tensor(b + "attn_q.weight", [D, 2 * H * Dh], Q4_K, None)
            w.tensor(b + "attn_k.weight", [D, Hkv * Dh], Q4_K, None)
            w.tensor(b + "attn_v.weight", [D, Hkv * Dh], Q4_K, None)
            w.tensor(b + "attn_output.weight", [H * Dh, D], Q4_K, None)
            w.tensor(b + "attn_q_norm.weight", [Dh], F32, ones)
            w.tensor(b + "attn_k_norm.weight", [Dh], F32, ones)
        w.tensor(b + "ffn_gate_inp.weight", [D, E], F32, small(0.02))
        w.tensor(b + "ffn_gate_exps.weight", [D, F, E], Q4_K, None)
        w.tensor(b + "ffn_up_exps.weight", [D, F, E], Q4_K, None)
        w.tensor(b + "ffn_down_exps.weight", [F, D, E], Q4_K, None)
        w.tensor(b + "ffn_gate_inp_shexp.weight", [D], F32, small(0.02))
        w.tensor(b + "ffn_gate_shexp.weight", [D, Fs], Q4_K, None)
        w.tensor(b + "ffn_up_shexp.weight", [D, Fs], Q4_K, None)
        w.tensor(b + "ffn_down_shexp.weight", [Fs, D], Q4_K, None)
    w.tensor("output_norm.weight", [D], F32, ones)
    w.tensor("output.weight", [D, V], Q4_K, None)
    total = w.write(a.out, rng)
    print(f"wrote {a.out}: {len(w.tensors)} tensors, {total / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
