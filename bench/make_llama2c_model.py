#!/usr/bin/python3
"""Writes a random-weight model in llama2.c's two checkpoint formats, for the decode benchmark
(bench/run_decode_bench.sh) against llama2.c's run.c and runq.c:

  OUT.bin      the legacy f32 format run.c reads (and sinkscope): 7 int32 (dim, hidden_dim,
               n_layers, n_heads, n_kv_heads, vocab_size, seq_len), then the weights in the order
               of llama2.c's export.py legacy_export (embedding, norms, wq..w3, final norm, the
               two unused RoPE tables), as run.c's memory_map_weights reads them.
  OUT.q80.bin  the "version 2" format runq.c reads: a 256-byte header (magic "ak42", version 2,
               the 7 ints, shared-classifier byte, group size), the norms in f32, then every
               matrix as int8 groups of GROUP values with one f32 scale per group
               (scale = max|w| / 127, q = round(w / scale)), as export.py's version2_export.
  tokenizer.bin  a llama2.c tokenizer with VOCAB placeholder pieces, so both programs start.

The layouts are llama2.c's (tools/peers/llama2c/export.py, run.c, runq.c; MIT); the code is ours.
Weights are uniform with standard deviation 1/sqrt(fan_in), norms 1; the classifier is shared
with the embedding, as in the stories models.
"""
import argparse
import os
import struct

import numpy as np

PRESETS = {  # llama2.c's stories models (README, "Models" table)
    "stories15m": dict(dim=288, hidden=768, layers=6, heads=6, vocab=32000, seq=256),
    "stories42m": dict(dim=512, hidden=1376, layers=8, heads=8, vocab=32000, seq=1024),
    "stories110m": dict(dim=768, hidden=2048, layers=12, heads=12, vocab=32000, seq=1024),
    # Not a llama2.c model: 0.89B parameters (TinyLlama's width and MLP, 16 layers, no GQA), so that
    # even its 4-bit weights (0.5 GB) are larger than a server CPU's last-level cache (260 MB on
    # the Xeon of docs/BENCHMARKS.md) and decode reads them from memory, not from the cache.
    "llama-0.9b": dict(dim=2048, hidden=5632, layers=16, heads=16, vocab=32000, seq=1024),
}


def uniform(rng, shape, fan_in):
    a = np.sqrt(3.0 / fan_in)
    return rng.uniform(-a, a, size=shape).astype(np.float32)


def q80(w, group):
    flat = w.reshape(-1, group)
    scale = np.abs(flat).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q = np.round(flat / scale[:, None]).astype(np.int8)
    return q, scale.astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), required=True)
    ap.add_argument("--out", required=True, help="path without extension")
    ap.add_argument("--group", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    p = PRESETS[args.preset]
    D, F, L, H, V, S = p["dim"], p["hidden"], p["layers"], p["heads"], p["vocab"], p["seq"]
    head = D // H
    rng = np.random.default_rng(args.seed)
    emb = uniform(rng, (V, D), D)
    mats = {
        "wq": [uniform(rng, (D, D), D) for _ in range(L)],
        "wk": [uniform(rng, (D, D), D) for _ in range(L)],
        "wv": [uniform(rng, (D, D), D) for _ in range(L)],
        "wo": [uniform(rng, (D, D), D) for _ in range(L)],
        "w1": [uniform(rng, (F, D), D) for _ in range(L)],
        "w2": [uniform(rng, (D, F), F) for _ in range(L)],
        "w3": [uniform(rng, (F, D), D) for _ in range(L)],
    }
    ones = np.ones(D, np.float32)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    tmp = args.out + ".bin.tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("7i", D, F, L, H, H, V, S))
        # run.c's memory_map_weights order: embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2,
        # w3, rms_final, the two unused RoPE tables
        f.write(emb.tobytes())
        for _ in range(L):
            f.write(ones.tobytes())  # attention norms
        for name in ("wq", "wk", "wv", "wo"):
            for w in mats[name]:
                f.write(w.tobytes())
        for _ in range(L):
            f.write(ones.tobytes())  # ffn norms
        for name in ("w1", "w2", "w3"):
            for w in mats[name]:
                f.write(w.tobytes())
        f.write(ones.tobytes())  # final norm
        f.write(np.zeros(S * head // 2 * 2, np.float32).tobytes())  # freq_cis_real / _imag
    os.replace(tmp, args.out + ".bin")

    tmp = args.out + ".q80.bin.tmp"
    with open(tmp, "wb") as f:
        header = struct.pack("Ii", 0x616B3432, 2) + struct.pack("7i", D, F, L, H, H, V, S)
        header += struct.pack("B", 1) + struct.pack("i", args.group)
        f.write(header + b"\0" * (256 - len(header)))
        for _ in range(2 * L + 1):
            f.write(ones.tobytes())  # attention norms, ffn norms, final norm
        for w in [emb] + [w for name in ("wq", "wk", "wv", "wo", "w1", "w2", "w3") for w in mats[name]]:
            q, s = q80(w, args.group)
            f.write(q.tobytes())
            f.write(s.tobytes())
    os.replace(tmp, args.out + ".q80.bin")

    tok = os.path.join(os.path.dirname(os.path.abspath(args.out)), "tokenizer.bin")
    with open(tok + ".tmp", "wb") as f:
        pieces = [b"<unk>", b"<s>", b"</s>"] + [bytes([0x20 + i % 90]) * (1 + i // 90 % 3) for i in range(V - 3)]
        f.write(struct.pack("i", max(len(x) for x in pieces)))
        for i, piece in enumerate(pieces):
            f.write(struct.pack("fi", -float(i), len(piece)) + piece)
    os.replace(tok + ".tmp", tok)
    print(f"{args.out}.bin, {args.out}.q80.bin, {tok}: {args.preset}, "
          f"{(V * D + L * (4 * D * D + 3 * D * F)) / 1e6:.1f} M weights")


if __name__ == "__main__":
    main()
