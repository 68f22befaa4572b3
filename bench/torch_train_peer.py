#!/usr/bin/python3
"""PyTorch-eager peer of bench_train's BM_TrainStep: the same Llama-style model (RMSNorm pre-norm,
RoPE rotate-half, causal MHA, SwiGLU, tied embeddings), batch, AdamW and clipping, timed the same
way (full optimiser steps, after warm-up). Run with Debian's python3-torch and the same thread count.
Prints one JSON line: tokens/s and achieved GFLOP/s with bench_train's FLOP count."""
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F


def env(name, default):
    return int(os.environ.get(name, default))


D, L, H, V = env("SS_BENCH_DIM", 128), env("SS_BENCH_LAYERS", 4), env("SS_BENCH_HEADS", 4), env("SS_BENCH_VOCAB", 2048)
B, T = env("SS_BENCH_BATCH", 16), env("SS_BENCH_SEQ", 128)
threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
torch.set_num_threads(threads)
torch.manual_seed(0)
Dh = D // H
Fh = ((8 * D + 2) // 3 + 7) // 8 * 8


class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


def rope(x, cos, sin):  # x (B, H, T, Dh), rotate_half pairs (i, i + Dh/2)
    x1, x2 = x[..., : Dh // 2], x[..., Dh // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = RMSNorm(D), RMSNorm(D)
        self.q = torch.nn.Linear(D, D, bias=False)
        self.k = torch.nn.Linear(D, D, bias=False)
        self.v = torch.nn.Linear(D, D, bias=False)
        self.o = torch.nn.Linear(D, D, bias=False)
        self.w1 = torch.nn.Linear(D, Fh, bias=False)
        self.w3 = torch.nn.Linear(D, Fh, bias=False)
        self.w2 = torch.nn.Linear(Fh, D, bias=False)

    def forward(self, x, cos, sin, mask):
        h = self.n1(x)
        q = self.q(h).view(B, T, H, Dh).transpose(1, 2)
        k = self.k(h).view(B, T, H, Dh).transpose(1, 2)
        v = self.v(h).view(B, T, H, Dh).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(Dh) + mask
        z = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.o(z)
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, D)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(L)])
        self.norm = RMSNorm(D)

    def forward(self, idx, cos, sin, mask):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x, cos, sin, mask)
        return self.norm(x) @ self.emb.weight.t()


model = Model()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
pos = torch.arange(T, dtype=torch.float64)[:, None]
freq = 10000.0 ** (-torch.arange(0, Dh // 2, dtype=torch.float64) * 2 / Dh)
cos, sin = torch.cos(pos * freq).float(), torch.sin(pos * freq).float()
mask = torch.full((T, T), float("-inf")).triu(1)
idx = torch.randint(0, V, (B, T))
tgt = torch.randint(0, V, (B, T))


def step():
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(idx, cos, sin, mask).view(-1, V), tgt.view(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


for _ in range(3):
    step()
# Timed in process CPU time as bench_train is (MeasureProcessCPUTime): on a shared machine wall
# time measures the neighbours. Wall-clock figures are printed too.
steps, start, cpu_start = 0, time.perf_counter(), time.process_time()
while time.process_time() - cpu_start < seconds:
    step()
    steps += 1
elapsed = time.process_time() - cpu_start
wall = time.perf_counter() - start
matmul_params = L * (4 * D * D + 3 * D * Fh) + V * D
flops_per_token = 6 * matmul_params + 12 * L * D * T
tps = steps * B * T / elapsed
print(json.dumps({"impl": "pytorch-eager", "torch": torch.__version__, "threads": threads,
                  "config": f"D{D} L{L} H{H} V{V} B{B} T{T}", "steps": steps,
                  "tokens_per_cpu_s": round(tps, 1), "gflops_per_cpu_s": round(tps * flops_per_token / 1e9, 3),
                  "tokens_per_wall_s": round(steps * B * T / wall, 1)}))
