#!/usr/bin/env python3
"""The weights of a sigmoid-attention checkpoint (the trainer's attention=sigmoid), read from the
pattern hook, beside Gu et al.'s proxy (each row divided by its sum): per layer the mean weight on
position 0, the mean row total, and the rows that attend at all (total > 0.5): their share, mean
total and how often their largest weight is on the previous position (a copy).

    python3 scripts/sigmoid_weights.py CHECKPOINT TOKENS.txt [--bos] [--windows 64] [--length 32]

TOKENS.txt: whitespace-separated token ids (for example `sinkscope train ... --write-stream`);
window w is ids[1 + 40 w : ...] (the stream's own first token skipped), with token 0 (the
Bigram-Backcopy BOS) put first when --bos. Needs the Python module on PYTHONPATH (build/python).
"""
import argparse

import numpy as np

import sinkscope


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("tokens")
    ap.add_argument("--bos", action="store_true")
    ap.add_argument("--windows", type=int, default=64)
    ap.add_argument("--length", type=int, default=32)
    a = ap.parse_args()
    ids = np.array([int(x) for x in open(a.tokens).read().split()])
    m = sinkscope.load(a.checkpoint)
    if not m.config["attn_sigmoid"]:
        raise SystemExit(f"{a.checkpoint}: not a sigmoid-attention model")
    for layer in range(m.n_layers):
        w0, totals, proxy0, big, prev = [], [], [], 0, 0
        for w in range(a.windows):
            body = ids[1 + 40 * w: 1 + 40 * w + a.length]
            if len(body) < a.length:
                raise SystemExit(f"{a.tokens}: too few tokens for {a.windows} windows")
            seq = np.concatenate([[0], body[:-1]]) if a.bos else body
            _, cache = m.run_with_cache(seq, names=[f"blocks.{layer}.attn.hook_pattern"])
            p = cache[f"blocks.{layer}.attn.hook_pattern"]  # (H, T, T): the weights themselves
            rows = p.sum(-1)
            w0.append(p[:, :, 0].mean())
            totals.append(rows.mean())
            attends = rows > 0  # a row whose weights all underflow to 0 has no proxy
            proxy0.append((p[:, :, 0][attends] / rows[attends]).mean())
            for h in range(p.shape[0]):
                for i in range(1, p.shape[1]):
                    if rows[h, i] > 0.5:
                        big += 1
                        prev += int(np.argmax(p[h, i]) == i - 1)
        n_rows = a.windows * m.n_heads * (a.length - 1)
        print(f"layer {layer}: weight on position 0 {np.mean(w0):.4f}, row total {np.mean(totals):.4f}, "
              f"proxy alpha_0 {np.mean(proxy0):.3f}; rows with total > 0.5: {big}/{n_rows} "
              f"({big / n_rows:.3f}), largest weight on the previous position in {prev}")


if __name__ == "__main__":
    main()
