#!/usr/bin/env python3
"""llama-perplexity's statistic computed by sinkscope's forward (the Python module), to put beside
llama.cpp's own on the same GGUF file: the text tokenized with BOS, cut into chunks of N_CTX
tokens, each chunk's first token replaced by BOS, the next-token NLL of positions N_CTX/2 .. N_CTX-2
of each chunk, and the running perplexity after each chunk ([1]..[CHUNKS]), as llama.cpp's
tools/perplexity prints them.

    PYTHONPATH=build/python python3 bench/llamacpp_ppl_chunks.py MODEL.gguf TEXT N_CTX CHUNKS
"""
import math
import sys

import numpy as np
import sinkscope

path, text_path, n_ctx, chunks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = sinkscope.Model(path, precision=sys.argv[5] if len(sys.argv) > 5 else "")
text = open(text_path, encoding="utf-8").read()
tokens = list(m.tokenize(text, bos=True))
bos = tokens[0]
first = n_ctx // 2
nll, count, running = 0.0, 0, []
for c in range(chunks):
    chunk = tokens[c * n_ctx:(c + 1) * n_ctx]
    ids = [bos] + chunk[1:]
    logits = np.asarray(m.forward(ids), dtype=np.float64)
    for p in range(first, n_ctx - 1):
        row = logits[p]
        mx = row.max()
        lse = mx + math.log(np.exp(row - mx).sum())
        nll += lse - row[chunk[p + 1]]
        count += 1
    running.append(math.exp(nll / count))
print("tokens", len(tokens), " ".join(f"[{i+1}]{v:.4f}" for i, v in enumerate(running)))
