"""Notebook plots of sinkscope results, with matplotlib (Debian python3-matplotlib; optional: only
this module needs it). Each function returns the matplotlib Figure; pass ``ax`` to draw into an
existing Axes instead."""

from __future__ import annotations

import numpy as np


def _axes(ax, figsize):
    import matplotlib.pyplot as plt
    if ax is not None:
        return ax.figure, ax
    fig, ax = plt.subplots(figsize=figsize)
    return fig, ax


def alpha_heatmap(result, condition="bos", k=0, ax=None):
    """alpha_k per layer (rows) and head (columns) for one condition of an AnalyzeResult."""
    alpha = result.conditions[condition]["alpha"][k]
    fig, ax = _axes(ax, (1.2 + 0.45 * alpha.shape[1], 1.0 + 0.4 * alpha.shape[0]))
    im = ax.imshow(alpha, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(alpha.shape[1]))
    ax.set_yticks(range(alpha.shape[0]))
    ax.set_title(f"alpha_{k} ({condition})")
    for (l, h), v in np.ndenumerate(alpha):
        ax.text(h, l, f"{v:.2f}", ha="center", va="center", fontsize=7,
                color="white" if v < 0.6 else "black")
    fig.colorbar(im, ax=ax)
    return fig


def sink_rate_per_layer(result, k=0, ax=None):
    """Sink_k^eps per layer, one line per condition."""
    fig, ax = _axes(ax, (6, 3.5))
    for name, c in result.conditions.items():
        rate = c["sink_rate_per_layer"][k]
        ax.plot(range(len(rate)), rate, marker="o", label=name)
    ax.set_xlabel("layer")
    ax.set_xticks(range(len(rate)))
    ax.set_ylabel(f"Sink_{k} rate")
    ax.set_ylim(-0.02, 1.02)
    ax.legend()
    ax.set_title(f"Sink_{k} rate per layer")
    return fig


def p0_norm_ratio(result, ax=None):
    """||h_0|| / median ||h_i|| after each block, one line per condition (log scale)."""
    fig, ax = _axes(ax, (6, 3.5))
    for name, c in result.conditions.items():
        ratio = c["p0_norm_ratio"]
        ax.plot(range(len(ratio)), ratio, marker="o", label=name)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_xticks(range(len(ratio)))
    ax.set_ylabel("P0 norm ratio")
    ax.legend()
    ax.set_title("P0 norm ratio per layer")
    return fig


def stream_nll(result, window=64, ax=None):
    """Per-token NLL by position for each policy of a StreamResult, smoothed over ``window`` tokens."""
    fig, ax = _axes(ax, (7, 3.5))
    for run in result.runs:
        nll = run["nll"]
        w = max(1, min(window, len(nll)))
        smooth = np.convolve(nll, np.ones(w) / w, mode="valid")
        ax.plot(np.arange(len(smooth)) + w, smooth,
                label=f"{run['policy']} ({run['sinks']}+{run['window']}): ppl {run['perplexity']:.2f}")
    ax.set_xlabel("position (tokens)")
    ax.set_ylabel(f"NLL (mean of {window})")
    ax.legend()
    ax.set_title("Streaming NLL by position")
    return fig
