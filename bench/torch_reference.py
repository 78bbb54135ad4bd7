#!/usr/bin/env python3
"""torch_reference.py — the same decoder written the usual research way in PyTorch-Python, for the
training-speed benchmark (bench/train_bench.cpp runs it; Debian's python3-torch, the same 1.13).

What it is: a Qwen3-style decoder (pre-RMSNorm, RoPE on the last dims in interleaved pairs, Q/K
RMSNorm, MQA or grouped KV heads (--kv-heads, full attention only), optional SwiGLU MLP, tied embeddings)
with full attention or the paper's W/S chunked
compressor (scalar gates, per-offset payload maps, separate K/V, 16-token window), trained with
AdamW for a fixed number of steps on random tokens, or on the batches in --data (raw int64: per step
tokens [B, T] then targets [B, T], -1 = no loss; the logits of every row are computed and the
unscored ones masked with ignore_index, the usual research way). The compressed path is written as a research
prototype would: raw keys and compressed entries concatenated, one T x (T + N) score matrix with a
mask. It prints one line: "tokens_per_s <float>" (batch x seq over the median step time).
What it is not: a reference for correctness (tests/ use the C++ loop reference) or part of the product.
Usage: torch_reference.py --kind full|chunked --d 128 --layers 2 --heads 4 --head-dim 32 --seq 256
       --batch 32 --steps 20 --vocab 529 [--kv-heads 1] [--mlp 0] [--tune-malloc] [--threads N] [--data FILE]
"""
import argparse
import ctypes
import math
import time

p = argparse.ArgumentParser()
p.add_argument("--kind", default="chunked")
p.add_argument("--d", type=int, default=128)
p.add_argument("--layers", type=int, default=2)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--head-dim", type=int, default=32)
p.add_argument("--kv-heads", type=int, default=1)
p.add_argument("--seq", type=int, default=256)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--vocab", type=int, default=529)
p.add_argument("--mlp", type=int, default=0)
p.add_argument("--W", type=int, default=8)
p.add_argument("--S", type=int, default=8)
p.add_argument("--window", type=int, default=16)
p.add_argument("--threads", type=int, default=0)
p.add_argument("--tune-malloc", action="store_true")
p.add_argument("--data", default="")
a = p.parse_args()
if a.kv_heads != 1 and (a.kind != "full" or a.heads % a.kv_heads):
    p.error("--kv-heads > 1 needs --kind full and --heads a multiple of it")

if a.tune_malloc:  # the same glibc settings as phasescope's runtime_init
    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
    libc.mallopt(M_MMAP_MAX, 0)
    libc.mallopt(M_TRIM_THRESHOLD, -1)
    libc.mallopt(M_TOP_PAD, 64 << 20)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if a.threads > 0:
    torch.set_num_threads(a.threads)
torch.manual_seed(0)


def rms(x, w=None, eps=1e-6):
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * w if w is not None else x


def rope(x, pos, theta=10000.0):
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = (pos.double()[:, None] * inv[None, :]).float()
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    xa, xb = x[..., 0::2], x[..., 1::2]
    return torch.stack([xa * cos - xb * sin, xa * sin + xb * cos], -1).flatten(-2)


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        d, H, D = a.d, a.heads, a.head_dim
        self.wq = nn.Linear(d, H * D, bias=False)
        self.wk = nn.Linear(d, a.kv_heads * D, bias=False)
        self.wv = nn.Linear(d, a.kv_heads * D, bias=False)
        self.wo = nn.Linear(H * D, d, bias=False)
        self.qn = nn.Parameter(torch.ones(D))
        self.kn = nn.Parameter(torch.ones(D))
        if a.kind == "chunked":
            self.gk = nn.Parameter(torch.randn(a.W, d) * 0.02)
            self.bk = nn.Parameter(torch.zeros(a.W))
            self.ck = nn.Parameter(torch.randn(a.W, D, d) * 0.02)
            self.gv = nn.Parameter(torch.randn(a.W, d) * 0.02)
            self.bv = nn.Parameter(torch.zeros(a.W))
            self.cv = nn.Parameter(torch.randn(a.W, D, d) * 0.02)

    def forward(self, x):
        B, T, _ = x.shape
        H, D, G = a.heads, a.head_dim, a.kv_heads
        pos = torch.arange(T)
        q = rope(rms(self.wq(x).view(B, T, H, D), self.qn), pos)
        k = rope(rms(self.wk(x).view(B, T, G, D), self.kn), pos)
        v = self.wv(x).view(B, T, G, D)
        qi = pos[:, None]
        if a.kind == "full":
            mask = pos[None, :] <= qi
            K, V = k, v
        else:
            N = (T - a.W) // a.S + 1
            idx = torch.arange(N)[:, None] * a.S + torch.arange(a.W)[None, :]       # [N, W]
            xg = x[:, idx]                                                          # [B, N, W, d]
            pk = torch.einsum("bnwe,wce->bnwc", xg, self.ck)
            pv = torch.einsum("bnwe,wce->bnwc", xg, self.cv)
            ak = torch.softmax(torch.einsum("bnwe,we->bnw", xg, self.gk) + self.bk, -1)
            av = torch.softmax(torch.einsum("bnwe,we->bnw", xg, self.gv) + self.bv, -1)
            kc = (ak[..., None] * pk).sum(2)[:, :, None]                            # [B, N, 1, D]
            vc = (av[..., None] * pv).sum(2)[:, :, None]
            kc = rope(rms(kc, self.kn), torch.arange(N) * a.S)
            K, V = torch.cat([k, kc], 1), torch.cat([v, vc], 1)                    # [B, T + N, 1, D]
            raw = (pos[None, :] <= qi) & (qi - pos[None, :] < a.window)
            comp = (torch.arange(N)[None, :] * a.S + a.W - 1) <= qi
            mask = torch.cat([raw, comp], 1)                                        # [T, T + N]
        K, V = K.repeat_interleave(H // K.shape[2], 2), V.repeat_interleave(H // V.shape[2], 2)  # query head h reads KV head h // (H / G)
        s = torch.einsum("bthd,bshd->bhts", q, K) / math.sqrt(D)
        s = s.masked_fill(~mask, float("-inf"))
        o = torch.einsum("bhts,bshd->bthd", torch.softmax(s, -1), V)
        return self.wo(o.reshape(B, T, H * D))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(a.vocab, a.d)
        self.attn = nn.ModuleList([Attn() for _ in range(a.layers)])
        self.n1 = nn.ParameterList([nn.Parameter(torch.ones(a.d)) for _ in range(a.layers)])
        if a.mlp > 0:
            self.n2 = nn.ParameterList([nn.Parameter(torch.ones(a.d)) for _ in range(a.layers)])
            self.up = nn.ModuleList([nn.Linear(a.d, 2 * a.mlp, bias=False) for _ in range(a.layers)])
            self.down = nn.ModuleList([nn.Linear(a.mlp, a.d, bias=False) for _ in range(a.layers)])
        self.nf = nn.Parameter(torch.ones(a.d))

    def forward(self, t):
        h = self.emb(t)
        for i in range(a.layers):
            h = h + self.attn[i](rms(h, self.n1[i]))
            if a.mlp > 0:
                g, u = self.up[i](rms(h, self.n2[i])).chunk(2, -1)
                h = h + self.down[i](F.silu(g) * u)
        return rms(h, self.nf) @ self.emb.weight.t()


model = Model()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
if a.data:
    raw = torch.from_numpy(__import__("numpy").fromfile(a.data, dtype="<i8")).view(-1, 2, a.batch, a.seq)
    assert raw.shape[0] >= a.steps + 2, "--data holds fewer than steps + 2 batches"
    batches = [(raw[s, 0], raw[s, 1]) for s in range(a.steps + 2)]
else:
    batches = [(torch.randint(0, a.vocab, (a.batch, a.seq)), torch.randint(0, a.vocab, (a.batch, a.seq)))] * (a.steps + 2)
times = []
for step in range(a.steps + 2):
    t0 = time.perf_counter()
    tok, tgt = batches[step]
    opt.zero_grad()
    loss = F.cross_entropy(model(tok).reshape(-1, a.vocab), tgt.reshape(-1), ignore_index=-1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if step >= 2:
        times.append(time.perf_counter() - t0)
times.sort()
print("tokens_per_s", a.batch * a.seq / times[len(times) // 2])  # median step
