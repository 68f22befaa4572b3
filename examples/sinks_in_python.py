#!/usr/bin/env python3
"""Attention sinks from Python, on the shipped stories260K model (README "Python").

1. Sink rates with and without BOS (sinkscope.analyze, the same numbers as `sinkscope analyze`).
2. Activation patching: position 0's residual stream after block 0 replaced by that of another
   sample whose position 0 is a text token (no BOS), then the change in alpha_0 per layer and in
   the next-token loss.
3. Plots (matplotlib, optional): alpha_0 heatmaps per condition, sink rate per layer, P0 norm ratio.

Run from the repository root after building (scripts/setup.sh), either with the package installed
(pip install .) or with PYTHONPATH=build/python:

    PYTHONPATH=build/python python3 examples/sinks_in_python.py [--out sinks_in_python.png]
"""
import argparse
import pathlib

import numpy as np

import sinkscope

ROOT = pathlib.Path(__file__).resolve().parents[1]


def alpha0(cache, n_layers):
    """alpha_0 per (layer, head): the mean over queries of the attention on key 0."""
    return np.stack([cache[f"blocks.{l}.attn.hook_pattern"][:, :, 0].mean(axis=1)
                     for l in range(n_layers)])


def nll(logits, ids):
    logp = logits[:-1] - np.log(np.exp(logits[:-1] - logits[:-1].max(1, keepdims=True)).sum(1,
                                  keepdims=True)) - logits[:-1].max(1, keepdims=True)
    return -logp[np.arange(len(ids) - 1), ids[1:]].mean()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models/stories260K/stories260K.bin"))
    ap.add_argument("--out", default="sinks_in_python.png", help="figure (needs matplotlib)")
    args = ap.parse_args()

    m = sinkscope.load(args.model)
    L = m.n_layers
    print(f"{m.path}: {L} layers x {m.n_heads} heads, vocabulary {m.config['vocab_size']}")

    # 1. BOS against no BOS (and a random token at position 0).
    r = sinkscope.analyze(m, conditions="bos,no-bos,random-p0", samples=32, length=64)
    print("\nSink_0 rate (share of heads with alpha_0 > 0.3), per layer:")
    print("layer " + "".join(f"{name:>11}" for name in r.conditions))
    for l in range(L):
        print(f"{l:5d} " + "".join(f"{c['sink_rate_per_layer'][0][l]:11.3f}"
                                   for c in r.conditions.values()))
    for name, c in r.conditions.items():
        print(f"{name:>10}: Sink_0 {c['sink_rate'][0]:.3f}, P0 norm ratio after the last block "
              f"{c['p0_norm_ratio'][-1]:.2f}")

    # 2. Patch position 0 after block 0 from a donor whose position 0 is a text token.
    text = "Once upon a time, there was a little girl named Lily. She loved to play in the park."
    donor_text = "The sun was hot and the dog ran to the big tree to sleep in the shade."
    ids = m.tokenize(text, bos=True)
    donor = m.tokenize(donor_text, bos=False)
    patterns = [f"blocks.{l}.attn.hook_pattern" for l in range(L)]
    _, donor_cache = m.run_with_cache(donor, names=["blocks.0.hook_resid_post"])
    donor_p0 = donor_cache["blocks.0.hook_resid_post"][0]

    def patch_p0(act, hook):
        act[0] = donor_p0  # in place; returning a new array works too

    clean_logits, clean = m.run_with_cache(ids, names=patterns)
    patched_logits, patched = m.run_with_cache(ids, names=patterns,
                                               hooks=[("blocks.0.hook_resid_post", patch_p0)])
    a_clean, a_patched = alpha0(clean, L), alpha0(patched, L)
    print(f"\nPatching position 0 after block 0 (BOS -> the donor's '{donor_text.split()[0]}'):")
    print("layer  mean alpha_0 clean  patched")
    for l in range(L):
        print(f"{l:5d}  {a_clean[l].mean():18.3f}  {a_patched[l].mean():7.3f}")
    print(f"next-token NLL: clean {nll(clean_logits, ids):.4f}, patched {nll(patched_logits, ids):.4f}")

    # 3. Plots.
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from sinkscope import plots
    except ImportError:
        print("\nmatplotlib is not installed (apt-get install python3-matplotlib): no figure")
        return
    fig, axes = plt.subplots(1, 4, figsize=(19, 4))
    plots.alpha_heatmap(r, "bos", ax=axes[0])
    plots.alpha_heatmap(r, "no-bos", ax=axes[1])
    plots.sink_rate_per_layer(r, ax=axes[2])
    plots.p0_norm_ratio(r, ax=axes[3])
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
