#!/usr/bin/env python3
# make_vectors.py - an independent fp64 reference of the official DeepSeek-V4 attention math
# (inference/model.py: Attention, Compressor, Indexer; kernel.py: sparse_attn), written from the
# facts, not copied, and the conformance vectors phasescope's C++ V4 loader/runner is tested against.
#
# It builds a small synthetic 3-layer V4 checkpoint (window-only, CSA m=4 + indexer, HCA m=16),
# stores it twice (official single-file layout, Hugging Face two-shard layout), draws one input and
# writes each layer's expected output. Everything is deterministic (fixed seed).
#
#   run:   python3 tests/v4/make_vectors.py        (from the repository root; writes into tests/v4/)
#   needs: python3 + numpy only (Debian: apt-get install python3-numpy). It never imports phasescope.
#
# Not simulated (on purpose): activation quantization (act_quant FP8 on the latents, fp4_act_quant in
# the indexer), the indexer's Hadamard rotation (orthogonal on both q and k, so it cancels in q.k when
# nothing is quantized), bf16 rounding of activations. Weights are used exactly as stored (FP8 codes
# times their UE8M0 block scale, BF16, F32), converted to fp64.
#
# Letters: B = batch, T = tokens, D = dim, H = heads, HD = head_dim, RD = rope dims (the last RD of a
# vector), W = window, m = compression ratio, N = T // m compressed entries, HI/DI = indexer heads/dim.

import os
import sys

try:
    import numpy as np
except ImportError:  # a pyenv/venv python without numpy: fall back to the distribution's python
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != "/usr/bin/python3":
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

import json
import math
import struct

OUT = os.path.dirname(os.path.abspath(__file__))
SEED = 20240607

# ---------------------------------------------------------------------------------------------------
# model configuration (the official ModelArgs field names)

CFG = dict(
    dim=144, n_layers=3, n_heads=4, head_dim=64, rope_head_dim=16, q_lora_rank=48,
    o_groups=2, o_lora_rank=32, window_size=16, norm_eps=1e-6,
    compress_ratios=[0, 4, 16],
    rope_theta=10000.0, compress_rope_theta=160000.0,
    rope_factor=16.0, original_seq_len=65536, beta_fast=32, beta_slow=1,
    index_n_heads=4, index_head_dim=32, index_topk=3,
    vocab_size=256, max_seq_len=4096,
)
BLOCK = 128       # FP8 weight block (rows x cols)
B, T = 2, 48      # input batch and length

# ---------------------------------------------------------------------------------------------------
# number formats: FP8 e4m3fn, UE8M0 scales, BF16


def e4m3_decode(code):
    """Value of one e4m3fn byte (None for NaN): 1 sign, 4 exponent (bias 7), 3 mantissa bits."""
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> 3) & 0xF
    m = code & 0x7
    if e == 15 and m == 7:
        return None
    if e == 0:
        return sign * (m / 8.0) * 2.0 ** -6
    return sign * (1.0 + m / 8.0) * 2.0 ** (e - 7)


E4M3 = [e4m3_decode(c) for c in range(256)]                     # index = code
E4M3_F64 = np.array([np.nan if v is None else v for v in E4M3])  # [256]
POS_VALUES = E4M3_F64[:0x7F]   # codes 0x00..0x7E: 0 .. 448, strictly increasing


def e4m3_encode_nearest(v):
    """Nearest e4m3 code of each value (|v| <= 448); halfway cases go to the even code."""
    mag = np.abs(v)
    hi = np.clip(np.searchsorted(POS_VALUES, mag, side="left"), 1, 0x7E)  # first value >= mag
    lo = hi - 1
    d_lo = mag - POS_VALUES[lo]
    d_hi = POS_VALUES[hi] - mag
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    assert np.all(mag <= 448.0)
    neg = (v < 0) & (code != 0)
    return np.where(neg, code | 0x80, code).astype(np.uint8)


def ue8m0_exponent(amax):
    """Smallest integer e with amax <= 448 * 2^e, i.e. e = ceil(log2(amax / 448))."""
    if amax == 0.0:
        return -127
    e = math.ceil(math.log2(amax / 448.0))
    while amax > 448.0 * 2.0 ** e:
        e += 1
    while amax <= 448.0 * 2.0 ** (e - 1):
        e -= 1
    return e


def quantize_fp8_blocks(w):
    """w [O, I] float -> (codes [O, I] uint8, scale bytes [ceil(O/128), ceil(I/128)] uint8,
    dequantized fp64 [O, I] = e4m3(code) * 2^(scale_byte - 127))."""
    O, I = w.shape
    so, si = -(-O // BLOCK), -(-I // BLOCK)
    codes = np.zeros((O, I), np.uint8)
    sbytes = np.zeros((so, si), np.uint8)
    deq = np.zeros((O, I))
    for bo in range(so):
        for bi in range(si):
            rows = slice(bo * BLOCK, min(O, (bo + 1) * BLOCK))
            cols = slice(bi * BLOCK, min(I, (bi + 1) * BLOCK))
            blk = w[rows, cols]
            e = ue8m0_exponent(float(np.max(np.abs(blk))))
            assert 0 <= e + 127 <= 254
            sbytes[bo, bi] = e + 127
            c = e4m3_encode_nearest(blk / 2.0 ** e)
            codes[rows, cols] = c
            deq[rows, cols] = E4M3_F64[c] * 2.0 ** e
    return codes, sbytes, deq


def bf16_round(x):
    """fp32 -> bf16 bits (round to nearest even) as uint16; no NaN/inf in our data."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return bits.astype(np.uint16)


def bf16_value(b16):
    return (b16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)

# ---------------------------------------------------------------------------------------------------
# safetensors, written and read by hand


NP_OF = {"F64": "<f8", "F32": "<f4", "BF16": "<u2", "F8_E4M3": "u1", "F8_E8M0": "u1", "I64": "<i8"}
SIZE_OF = {"F64": 8, "I64": 8, "F32": 4, "BF16": 2, "F8_E4M3": 1, "F8_E8M0": 1}


def st_tensor(dtype, arr):
    """A stored tensor: (dtype string, shape, raw little-endian bytes)."""
    arr = np.ascontiguousarray(np.asarray(arr).astype(NP_OF[dtype]))
    return (dtype, list(arr.shape), arr.tobytes())


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype, shape, bytes)}. Data ordered by element size (largest first) then name,
    so every tensor starts aligned to its element size; the header is space-padded to 8 bytes."""
    names = sorted(tensors, key=lambda n: (-SIZE_OF[tensors[n][0]], n))
    header, blobs, off = {}, [], 0
    for n in names:
        dtype, shape, raw = tensors[n]
        assert len(raw) == SIZE_OF[dtype] * int(np.prod(shape, dtype=np.int64))
        header[n] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = metadata or {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path):
    """-> ({name: (dtype, shape, bytes)}, metadata)"""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out, covered = {}, 0
    for name, d in header.items():
        b, e = d["data_offsets"]
        out[name] = (d["dtype"], d["shape"], data[8 + n + b:8 + n + e])
        covered += e - b
    assert covered == len(data) - 8 - n, f"{path}: data has holes or trailing bytes"
    return out, meta


def st_array(t):
    dtype, shape, raw = t
    return np.frombuffer(raw, NP_OF[dtype]).reshape(shape)

# ---------------------------------------------------------------------------------------------------
# weights: draw, store (FP8 / BF16 / F32), keep the exact stored values as fp64 for the reference


class Weights:
    def __init__(self, rng):
        self.rng = rng
        self.stored = {}   # name -> (dtype, shape, bytes)       what goes to the checkpoint
        self.used = {}     # name -> fp64 array                   what the reference computes with

    def fp8(self, name, out_f, in_f, std):
        # real-valued draw; each 128x128 block gets its own magnitude so the block scales differ
        w = self.rng.normal(0.0, std, (out_f, in_f))
        for bo in range(0, out_f, BLOCK):
            for bi in range(0, in_f, BLOCK):
                w[bo:bo + BLOCK, bi:bi + BLOCK] *= 2.0 ** self.rng.uniform(-1.0, 1.0)
        codes, sbytes, deq = quantize_fp8_blocks(w)
        self.stored[name + ".weight"] = st_tensor("F8_E4M3", codes)
        self.stored[name + ".scale"] = st_tensor("F8_E8M0", sbytes)
        self.used[name + ".weight"] = deq

    def bf16(self, name, values):
        b = bf16_round(values)
        self.stored[name] = st_tensor("BF16", b)
        self.used[name] = bf16_value(b)

    def f32(self, name, values):
        v = np.asarray(values, np.float32)
        self.stored[name] = st_tensor("F32", v)
        self.used[name] = v.astype(np.float64)

    def norm_weight(self, name, n):
        self.bf16(name, 1.0 + self.rng.uniform(-0.2, 0.2, n))

    def ape(self, name, m, width, favoured):
        """N(0, 0.5) plus +2 at one favoured in-block offset on about half the channels."""
        a = self.rng.normal(0.0, 0.5, (m, width))
        bumped = self.rng.random(width) < 0.5
        a[favoured, bumped] += 2.0
        self.f32(name, a)


def make_weights():
    c = CFG
    D, H, HD, QL = c["dim"], c["n_heads"], c["head_dim"], c["q_lora_rank"]
    G, OL = c["o_groups"], c["o_lora_rank"]
    HI, DI = c["index_n_heads"], c["index_head_dim"]
    favoured = {(1, "compressor"): 1, (1, "indexer.compressor"): 2, (2, "compressor"): 11}

    wt = Weights(np.random.default_rng(SEED))
    wt.bf16("embed.weight", wt.rng.normal(0.0, 1.0, (c["vocab_size"], D)))
    for i, ratio in enumerate(c["compress_ratios"]):
        p = f"layers.{i}."
        wt.norm_weight(p + "attn_norm.weight", D)                     # not attention: loaders skip it
        a = p + "attn."
        wt.f32(a + "attn_sink", wt.rng.normal(0.0, 1.0, H))           # [H]
        wt.fp8(a + "wq_a", QL, D, D ** -0.5)                          # [QL, D]
        wt.norm_weight(a + "q_norm.weight", QL)                       # [QL]
        wt.fp8(a + "wq_b", H * HD, QL, QL ** -0.5)                    # [H*HD, QL]
        wt.fp8(a + "wkv", HD, D, D ** -0.5)                           # [HD, D]
        wt.norm_weight(a + "kv_norm.weight", HD)                      # [HD]
        wt.fp8(a + "wo_a", G * OL, H * HD // G, (H * HD // G) ** -0.5)  # [G*OL, H*HD/G]
        wt.fp8(a + "wo_b", D, G * OL, (G * OL) ** -0.5)               # [D, G*OL]
        if ratio == 0:
            continue
        kappa = 2 if ratio == 4 else 1
        comps = [("compressor", HD)] + ([("indexer.compressor", DI)] if ratio == 4 else [])
        if ratio == 4:
            wt.fp8(a + "indexer.wq_b", HI * DI, QL, QL ** -0.5)       # [HI*DI, QL]
            wt.bf16(a + "indexer.weights_proj.weight",
                    wt.rng.normal(0.0, D ** -0.5, (HI, D)))            # [HI, D]
        for cname, d in comps:
            cp = a + cname + "."
            wt.bf16(cp + "wkv.weight", wt.rng.normal(0.0, D ** -0.5, (kappa * d, D)))    # [k*d, D]
            wt.bf16(cp + "wgate.weight", wt.rng.normal(0.0, D ** -0.5, (kappa * d, D)))  # [k*d, D]
            wt.ape(cp + "ape", ratio, kappa * d, favoured[(i, cname)])                    # [m, k*d]
            wt.norm_weight(cp + "norm.weight", d)                                         # [d]
    wt.norm_weight("norm.weight", D)
    return wt

# ---------------------------------------------------------------------------------------------------
# the reference: plain loops, fp64, one sequence at a time


def rope_freqs(ratio):
    """Per-pair angular frequency [RD/2] of a layer. Compressed layers: compress_rope_theta with YaRN
    (applied because original_seq_len > 0); window-only layers: rope_theta, no YaRN."""
    c = CFG
    rd = c["rope_head_dim"]
    base = c["compress_rope_theta"] if ratio else c["rope_theta"]
    freqs = np.array([base ** (-(2.0 * i) / rd) for i in range(rd // 2)])
    if ratio and c["original_seq_len"] > 0:
        def correction_dim(n_rot):   # pair index whose wavelength fits n_rot times in the original length
            return rd * math.log(c["original_seq_len"] / (n_rot * 2 * math.pi)) / (2 * math.log(base))
        low = max(math.floor(correction_dim(c["beta_fast"])), 0)
        high = min(math.ceil(correction_dim(c["beta_slow"])), rd - 1)
        if low == high:
            high += 0.001
        for i in range(rd // 2):
            ramp = min(max((i - low) / (high - low), 0.0), 1.0)   # 0: keep freq, 1: freq / factor
            freqs[i] = freqs[i] / c["rope_factor"] * ramp + freqs[i] * (1.0 - ramp)
    return freqs


def rope(v, pos, freqs, inverse=False):
    """Rotate interleaved pairs (v[k], v[k+1]) of the last RD dims by pos * freq (conjugate if inverse)."""
    v = v.copy()
    rd = 2 * len(freqs)
    base = len(v) - rd
    for i, f in enumerate(freqs):
        ang = -pos * f if inverse else pos * f
        cs, sn = math.cos(ang), math.sin(ang)
        x0, x1 = v[base + 2 * i], v[base + 2 * i + 1]
        v[base + 2 * i] = x0 * cs - x1 * sn
        v[base + 2 * i + 1] = x0 * sn + x1 * cs
    return v


def rms_norm(v, weight, eps):
    return v / math.sqrt(float(np.mean(v * v)) + eps) * weight


def softmax(logits):
    mx = max(logits)
    e = [math.exp(z - mx) for z in logits]
    s = sum(e)
    return [x / s for x in e]


def compress(x, wkv, wgate, ape, norm_w, m, d, freqs, eps):
    """Gated pooling of blocks of m tokens -> [N, d] (post RMSNorm, post RoPE at position j*m).
    m == 4 overlaps: entry j pools block j-1 through the FIRST d channels of a/z and block j through
    the LAST d channels; entry 0 has no previous block. Softmax per channel over all candidates.
    Also returns gate[j][c] = list of (token, weight) for the gate analysis."""
    T_, N = len(x), len(x) // m
    overlap = (m == 4)
    a = [wkv @ x[t] for t in range(T_)]                  # [T][k*d]
    z = [wgate @ x[t] + ape[t % m] for t in range(T_)]   # [T][k*d] (ape by in-block offset)
    out = np.zeros((N, d))
    gates = []
    for j in range(N):
        cur = range(j * m, (j + 1) * m)
        prev = range((j - 1) * m, j * m) if (overlap and j > 0) else range(0)
        entry = np.zeros(d)
        weights_j = []
        for ch in range(d):
            cands = [(s, ch) for s in prev] + [(s, ch + d if overlap else ch) for s in cur]
            p = softmax([z[s][k] for s, k in cands])
            entry[ch] = sum(pi * a[s][k] for pi, (s, k) in zip(p, cands))
            weights_j.append([(s, k >= d if overlap else True, pi) for pi, (s, k) in zip(p, cands)])
        out[j] = rope(rms_norm(entry, norm_w, eps), j * m, freqs)
        gates.append(weights_j)
    return out, gates


def select_topk(scores, visible, k):
    """Documented deterministic rule: visible entries sorted by score descending, ties by smaller
    index first; keep the first min(k, visible); pad with -1."""
    order = sorted(range(visible), key=lambda j: (-scores[j], j))
    picked = order[:min(k, visible)]
    return picked + [-1] * (k - len(picked))


def attention_layer(i, U, x):
    """One sequence x [T, D] through layer i. Returns dict of outputs (see README)."""
    c = CFG
    T_ = len(x)
    H, HD, RD, W, eps = c["n_heads"], c["head_dim"], c["rope_head_dim"], c["window_size"], c["norm_eps"]
    G, OL = c["o_groups"], c["o_lora_rank"]
    m = c["compress_ratios"][i]
    a = f"layers.{i}.attn."
    w = lambda n: U[a + n]
    freqs = rope_freqs(m)

    # query: low-rank, q_norm, per-head RMS (no weight), RoPE at t
    qr = [rms_norm(w("wq_a.weight") @ x[t], w("q_norm.weight"), eps) for t in range(T_)]  # [T][QL]
    q = np.zeros((T_, H, HD))
    for t in range(T_):
        qt = w("wq_b.weight") @ qr[t]
        for h in range(H):
            qh = qt[h * HD:(h + 1) * HD]
            qh = qh / math.sqrt(float(np.mean(qh * qh)) + eps)
            q[t, h] = rope(qh, t, freqs)

    # one latent per token, both key and value
    kv = np.array([rope(rms_norm(w("wkv.weight") @ x[t], w("kv_norm.weight"), eps), t, freqs)
                   for t in range(T_)])                                                  # [T, HD]

    res = {}
    comp = np.zeros((0, HD))
    if m:
        comp, gates = compress(x, w("compressor.wkv.weight"), w("compressor.wgate.weight"),
                               w("compressor.ape"), w("compressor.norm.weight"), m, HD, freqs, eps)
        res["kv_compressed"] = comp                                                      # [N, HD]
        res["gates"] = {"compressor": gates}
    N = len(comp)

    # compressed entries each query uses: HCA all visible, CSA the indexer's picks
    chosen = [list(range((t + 1) // m)) if m else [] for t in range(T_)]
    if m == 4:
        HI, DI, K = c["index_n_heads"], c["index_head_dim"], c["index_topk"]
        kI, gI = compress(x, w("indexer.compressor.wkv.weight"), w("indexer.compressor.wgate.weight"),
                          w("indexer.compressor.ape"), w("indexer.compressor.norm.weight"),
                          m, DI, freqs, eps)                                             # [N, DI]
        res["gates"]["indexer.compressor"] = gI
        res["indexer_kv_compressed"] = kI
        scores = np.full((T_, N), -np.inf)
        topk = np.full((T_, K), -1, np.int64)
        dots = []
        for t in range(T_):
            qIt = w("indexer.wq_b.weight") @ qr[t]
            qI = [rope(qIt[h * DI:(h + 1) * DI], t, freqs) for h in range(HI)]           # [HI][DI]
            wt = (w("indexer.weights_proj.weight") @ x[t]) * DI ** -0.5 * HI ** -0.5     # [HI]
            visible = (t + 1) // m
            for j in range(visible):
                s = 0.0
                for h in range(HI):
                    dot = float(qI[h] @ kI[j])
                    dots.append(dot)
                    s += wt[h] * max(dot, 0.0)
                scores[t, j] = s
            topk[t] = select_topk(list(scores[t]), visible, K)
            chosen[t] = [j for j in topk[t] if j >= 0]
        res["index_score"] = scores
        res["index_topk"] = topk
        res["index_dots"] = dots

    # attention over the union (window latents + chosen entries), sink in the denominator
    out = np.zeros((T_, c["dim"]))
    for t in range(T_):
        keys = [kv[s] for s in range(max(0, t - W + 1), t + 1)] + [comp[j] for j in chosen[t]]
        o = np.zeros(H * HD)
        for h in range(H):
            logits = [float(q[t, h] @ k) * HD ** -0.5 for k in keys]
            sink = float(w("attn_sink")[h])
            mx = max(max(logits), sink)
            e = [math.exp(l - mx) for l in logits]
            denom = sum(e) + math.exp(sink - mx)
            oh = sum(ei * k for ei, k in zip(e, keys)) / denom
            o[h * HD:(h + 1) * HD] = rope(oh, t, freqs, inverse=True)
        # grouped output projection: group g = heads [g*H/G, (g+1)*H/G), rows g*OL.. of wo_a
        gw = H * HD // G
        r = np.concatenate([w("wo_a.weight")[g * OL:(g + 1) * OL] @ o[g * gw:(g + 1) * gw]
                            for g in range(G)])
        out[t] = w("wo_b.weight") @ r
    res["out"] = out
    return res

# ---------------------------------------------------------------------------------------------------
# a second, vectorized formulation (complex RoPE, masks, batched softmax) used only as a self-check


def attention_layer_vectorized(i, U, x):
    c = CFG
    T_ = len(x)
    H, HD, W, eps = c["n_heads"], c["head_dim"], c["window_size"], c["norm_eps"]
    G, OL, m = c["o_groups"], c["o_lora_rank"], c["compress_ratios"][i]
    a = f"layers.{i}.attn."
    f = rope_freqs(m)
    pos = np.arange(T_)

    def rot(v, p, sign=1.0):  # v [..., X], p broadcastable to v[..., 0]
        rd = 2 * len(f)
        zc = v[..., -rd:].reshape(v.shape[:-1] + (rd // 2, 2))
        zc = (zc[..., 0] + 1j * zc[..., 1]) * np.exp(1j * sign * np.asarray(p)[..., None] * f)
        outv = v.copy()
        outv[..., -rd:] = np.stack([zc.real, zc.imag], -1).reshape(v.shape[:-1] + (rd,))
        return outv

    def rms(v, wgt):
        return v / np.sqrt(np.mean(v * v, -1, keepdims=True) + eps) * wgt

    def comp_v(pre, d):
        ak = x @ U[pre + "wkv.weight"].T
        zk = x @ U[pre + "wgate.weight"].T + U[pre + "ape"][pos % m]
        N = T_ // m
        ab, zb = ak[:N * m].reshape(N, m, -1), zk[:N * m].reshape(N, m, -1)
        if m == 4:
            pa = np.concatenate([np.zeros((1, m, d)), ab[:-1, :, :d]], 0)
            pz = np.concatenate([np.full((1, m, d), -np.inf), zb[:-1, :, :d]], 0)
            ab = np.concatenate([pa, ab[:, :, d:]], 1)
            zb = np.concatenate([pz, zb[:, :, d:]], 1)
        p = np.exp(zb - zb.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        return rot(rms((p * ab).sum(1), U[pre + "norm.weight"]), np.arange(N) * m)

    qr = rms(x @ U[a + "wq_a.weight"].T, U[a + "q_norm.weight"])
    q = (qr @ U[a + "wq_b.weight"].T).reshape(T_, H, HD)
    q = rot(q / np.sqrt(np.mean(q * q, -1, keepdims=True) + eps), pos[:, None])
    kv = rot(rms(x @ U[a + "wkv.weight"].T, U[a + "kv_norm.weight"]), pos)
    keys, mask = kv, (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - W)
    res = {}
    if m:
        comp = comp_v(a + "compressor.", HD)
        N = len(comp)
        vis = np.arange(N)[None, :] < ((pos + 1) // m)[:, None]      # [T, N]
        sel = vis
        if m == 4:
            HI, DI, K = c["index_n_heads"], c["index_head_dim"], c["index_topk"]
            kI = comp_v(a + "indexer.compressor.", DI)
            qI = rot((qr @ U[a + "indexer.wq_b.weight"].T).reshape(T_, HI, DI), pos[:, None])
            wI = (x @ U[a + "indexer.weights_proj.weight"].T) * DI ** -0.5 * HI ** -0.5
            sc = (np.maximum(np.einsum("thd,jd->thj", qI, kI), 0) * wI[:, :, None]).sum(1)
            sc = np.where(vis, sc, -np.inf)
            topk = np.full((T_, K), -1, np.int64)
            sel = np.zeros_like(vis)
            for t in range(T_):
                order = np.lexsort((np.arange(N), -sc[t]))[:min(K, vis[t].sum())]
                topk[t, :len(order)] = order
                sel[t, order] = True
            res.update(index_score=sc, index_topk=topk, indexer_kv_compressed=kI)
        res["kv_compressed"] = comp
        keys, mask = np.concatenate([kv, comp]), np.concatenate([mask, sel], 1)
    lg = np.einsum("thd,kd->thk", q, keys) * HD ** -0.5
    lg = np.where(mask[:, None, :], lg, -np.inf)
    sink = np.broadcast_to(U[a + "attn_sink"][None, :, None], (T_, H, 1))
    lg = np.concatenate([lg, sink], -1)
    p = np.exp(lg - lg.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = rot(np.einsum("thk,kd->thd", p[..., :-1], keys), pos[:, None], -1.0)
    og = o.reshape(T_, G, H * HD // G)
    r = np.einsum("tgd,grd->tgr", og, U[a + "wo_a.weight"].reshape(G, OL, -1)).reshape(T_, G * OL)
    res["out"] = r @ U[a + "wo_b.weight"].T
    return res

# ---------------------------------------------------------------------------------------------------
# configs


def official_config():
    c = CFG
    return {
        "max_batch_size": 4, "max_seq_len": c["max_seq_len"], "dtype": "fp8", "scale_fmt": "ue8m0",
        "expert_dtype": None, "scale_dtype": "fp8", "vocab_size": c["vocab_size"], "dim": c["dim"],
        "moe_inter_dim": 64, "n_layers": c["n_layers"], "n_hash_layers": 0, "n_mtp_layers": 0,
        "n_heads": c["n_heads"], "n_routed_experts": 4, "n_shared_experts": 1,
        "n_activated_experts": 2, "score_func": "sqrtsoftplus", "route_scale": 1.0,
        "swiglu_limit": 0.0, "q_lora_rank": c["q_lora_rank"], "head_dim": c["head_dim"],
        "rope_head_dim": c["rope_head_dim"], "norm_eps": c["norm_eps"], "o_groups": c["o_groups"],
        "o_lora_rank": c["o_lora_rank"], "window_size": c["window_size"],
        "compress_ratios": c["compress_ratios"], "compress_rope_theta": c["compress_rope_theta"],
        "original_seq_len": c["original_seq_len"], "rope_theta": c["rope_theta"],
        "rope_factor": c["rope_factor"], "beta_fast": c["beta_fast"], "beta_slow": c["beta_slow"],
        "index_n_heads": c["index_n_heads"], "index_head_dim": c["index_head_dim"],
        "index_topk": c["index_topk"], "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6,
    }


def hf_config():
    c = CFG
    return {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
        "hidden_size": c["dim"], "num_hidden_layers": c["n_layers"],
        "num_attention_heads": c["n_heads"], "num_key_value_heads": 1, "head_dim": c["head_dim"],
        "q_lora_rank": c["q_lora_rank"], "o_lora_rank": c["o_lora_rank"], "o_groups": c["o_groups"],
        "qk_rope_head_dim": c["rope_head_dim"], "rms_norm_eps": c["norm_eps"],
        "sliding_window": c["window_size"], "compress_ratios": c["compress_ratios"],
        "compress_rope_theta": c["compress_rope_theta"], "rope_theta": c["rope_theta"],
        "rope_scaling": {"type": "yarn", "factor": c["rope_factor"],
                         "original_max_position_embeddings": c["original_seq_len"],
                         "beta_fast": c["beta_fast"], "beta_slow": c["beta_slow"]},
        "index_n_heads": c["index_n_heads"], "index_head_dim": c["index_head_dim"],
        "index_topk": c["index_topk"], "max_position_embeddings": c["max_seq_len"],
        "vocab_size": c["vocab_size"], "num_nextn_predict_layers": 0, "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                                "weight_block_size": [BLOCK, BLOCK], "activation_scheme": "dynamic"},
    }


def hf_shard_of(name):
    """Shard 1: embed, layer 0, layer 1's core attention; shard 2: the rest of layer 1 (compressor,
    indexer and wo_b.scale - its weight stays in shard 1), layer 2, final norm."""
    if name == "embed.weight" or name.startswith("layers.0."):
        return 1
    if name.startswith("layers.1."):
        second = (".compressor." in name or ".indexer." in name
                  or name == "layers.1.attn.wo_b.scale")
        return 2 if second else 1
    return 2

# ---------------------------------------------------------------------------------------------------
# self-checks and reports


def check_e4m3_table():
    assert E4M3[0x38] == 1.0 and E4M3[0x7E] == 448.0 and E4M3[0x01] == 2.0 ** -9
    assert E4M3[0xB8] == -1.0 and E4M3[0x7F] is None and E4M3[0xFF] is None
    assert E4M3[0x08] == 2.0 ** -6 and E4M3[0x07] == 7 * 2.0 ** -9 and E4M3[0xFE] == -448.0
    assert np.all(np.diff(POS_VALUES) > 0)
    finite = [c for c in range(256) if E4M3[c] is not None]
    codes = e4m3_encode_nearest(np.array([E4M3[c] for c in finite]))
    for c, back in zip(finite, codes):   # every code round-trips (only -0 becomes +0)
        assert back == c or (c == 0x80 and back == 0x00), (hex(c), hex(back))
    # halfway between 1.0 (0x38) and 1.125 (0x39) goes to the even code; just above goes up
    assert e4m3_encode_nearest(np.array([1.0625]))[0] == 0x38
    assert e4m3_encode_nearest(np.array([1.0626]))[0] == 0x39


def check_weights_roundtrip(U, path_list):
    """Every stored tensor, read back from the files, decodes to exactly the value the reference used."""
    seen = {}
    for path in path_list:
        tensors, _ = read_safetensors(path)
        for name, t in tensors.items():
            assert name not in seen, f"{name} stored twice"
            seen[name] = t
    for name, used in U.items():
        t = seen[name]
        if t[0] == "F8_E4M3":
            sc = st_array(seen[name[:-len(".weight")] + ".scale"]).astype(np.int64)
            assert seen[name[:-len(".weight")] + ".scale"][0] == "F8_E8M0"
            codes = st_array(t)
            assert not np.any((codes & 0x7F) == 0x7F), f"{name}: NaN code stored"
            full = np.kron(2.0 ** (sc - 127), np.ones((BLOCK, BLOCK)))[:codes.shape[0], :codes.shape[1]]
            dec = E4M3_F64[codes] * full
        elif t[0] == "BF16":
            dec = bf16_value(st_array(t))
        else:
            dec = st_array(t).astype(np.float64)
        assert np.array_equal(dec, used), f"{name}: stored value differs from the reference's"
    return seen


def gate_summary(gates, m):
    """Mean gate weight by in-block offset of the candidate token (overlap: prev/cur half)."""
    acc = {}
    for weights_j in gates:
        for cands in weights_j:
            for s, is_cur, p in cands:
                key = ("cur" if is_cur else "prev", s % m)
                acc.setdefault(key, []).append(p)
    n_entries = len(gates) * len(gates[0])
    return {f"{k[0]}[{k[1]}]": round(sum(v) / n_entries, 3) for k, v in sorted(acc.items())}


def main():
    os.makedirs(os.path.join(OUT, "official"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "hf"), exist_ok=True)
    check_e4m3_table()

    # weights and the input (the input rng is separate so adding weights never changes x)
    wt = make_weights()
    U = wt.used
    x = np.random.default_rng(SEED + 1).normal(0.0, 1.0, (B, T, CFG["dim"]))  # [B, T, D]

    # e4m3 table
    with open(os.path.join(OUT, "fp8_e4m3_table.json"), "w") as f:
        json.dump(E4M3, f)   # [256] index = code, NaN codes 0x7F/0xFF as null
        f.write("\n")

    # official layout: one file
    off_path = os.path.join(OUT, "official", "model0-mp1.safetensors")
    write_safetensors(off_path, wt.stored)
    with open(os.path.join(OUT, "official", "config.json"), "w") as f:
        json.dump(official_config(), f, indent=2)
        f.write("\n")

    # HF layout: two shards + index
    shard_names = {1: "model-00001-of-00002.safetensors", 2: "model-00002-of-00002.safetensors"}
    shards = {1: {}, 2: {}}
    for name, t in wt.stored.items():
        shards[hf_shard_of(name)][name] = t
    for s, tensors in shards.items():
        write_safetensors(os.path.join(OUT, "hf", shard_names[s]), tensors)
    index = {"metadata": {"total_size": sum(len(t[2]) for t in wt.stored.values())},
             "weight_map": {n: shard_names[hf_shard_of(n)] for n in sorted(wt.stored)}}
    with open(os.path.join(OUT, "hf", "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    with open(os.path.join(OUT, "hf", "config.json"), "w") as f:
        json.dump(hf_config(), f, indent=2)
        f.write("\n")

    # input
    write_safetensors(os.path.join(OUT, "input.safetensors"), {"x": st_tensor("F64", x)},
                      {"description": "x [B, T, dim] fp64 N(0,1), the attention input of every layer"})

    # expected outputs, layer by layer, each layer fed the same x
    report = {}
    for i, m in enumerate(CFG["compress_ratios"]):
        per_b = [attention_layer(i, U, x[b]) for b in range(B)]
        exp = {"out": st_tensor("F64", np.stack([r["out"] for r in per_b]))}       # [B, T, D]
        if m:
            exp["kv_compressed"] = st_tensor("F64", np.stack([r["kv_compressed"] for r in per_b]))
        if m == 4:
            exp["index_topk"] = st_tensor("I64", np.stack([r["index_topk"] for r in per_b]))
            exp["index_score"] = st_tensor("F64", np.stack([r["index_score"] for r in per_b]))
            exp["indexer_kv_compressed"] = st_tensor(
                "F64", np.stack([r["indexer_kv_compressed"] for r in per_b]))
        write_safetensors(os.path.join(OUT, f"expected_layer{i}.safetensors"), exp,
                          {"layer": str(i), "compress_ratio": str(m),
                           "description": "fp64 reference of the official V4 attention; see README.md"})

        # self-check: the vectorized formulation agrees
        for b in range(B):
            v = attention_layer_vectorized(i, U, x[b])
            for key in ("out", "kv_compressed", "index_score", "indexer_kv_compressed"):
                if key in v:
                    ref = per_b[b][key]
                    fin = np.isfinite(ref)
                    assert np.array_equal(fin, np.isfinite(v[key])), (i, key)
                    err = np.max(np.abs(ref[fin] - v[key][fin])) if fin.any() else 0.0
                    assert err < 1e-12, (i, b, key, err)
            if "index_topk" in v:
                assert np.array_equal(v["index_topk"], per_b[b]["index_topk"]), (i, b)
        report[i] = (m, per_b, exp)

    # self-check: files read back to exactly the values used; both layouts hold the same bytes
    all_off = check_weights_roundtrip(U, [off_path])
    all_hf = check_weights_roundtrip(U, [os.path.join(OUT, "hf", n) for n in shard_names.values()])
    assert set(all_off) == set(all_hf) == set(wt.stored)
    assert all(all_off[n] == all_hf[n] for n in all_off)
    s1, _ = read_safetensors(os.path.join(OUT, "hf", shard_names[1]))
    s2, _ = read_safetensors(os.path.join(OUT, "hf", shard_names[2]))
    assert "embed.weight" in s1 and all(not n.startswith("layers.0.") for n in s2)
    assert all(not n.startswith("layers.2.") for n in s1)
    assert any(n.startswith("layers.1.") for n in s1) and any(n.startswith("layers.1.") for n in s2)
    assert "layers.1.attn.wo_b.weight" in s1 and "layers.1.attn.wo_b.scale" in s2

    # report
    print(f"wrote {OUT}")
    print(f"rope freqs ratio>0 (YaRN): {np.array2string(rope_freqs(4), precision=6)}")
    for i, (m, per_b, exp) in report.items():
        print(f"layer {i} (ratio {m}):")
        for key, t in exp.items():
            arr = st_array(t)
            fin = arr[np.isfinite(arr)] if arr.dtype.kind == "f" else arr
            print(f"  {key:22s} {t[0]:4s} {str(t[1]):14s} max|.| = {np.max(np.abs(fin)):.6g}")
        for cname, g in per_b[0].get("gates", {}).items():
            print(f"  gate weight by offset, {cname} (b=0): {gate_summary(g, m)}")
        if m == 4:
            K = CFG["index_topk"]
            zeros = ties_at_boundary = ties_inside = 0
            min_gap, rows = np.inf, 0
            for r in per_b:
                for t in range(T):
                    vis = (t + 1) // m
                    sc = r["index_score"][t, :vis]
                    zeros += int(np.sum(sc == 0.0))
                    srt = sorted(sc, reverse=True)
                    kk = min(K, vis)
                    if kk >= 2:
                        ties_inside += sum(srt[a] == srt[a + 1] for a in range(kk - 1))
                    if vis > K:
                        rows += 1
                        if srt[K - 1] == srt[K]:
                            ties_at_boundary += 1
                        else:
                            min_gap = min(min_gap, srt[K - 1] - srt[K])
            dots = np.abs(np.concatenate([r["index_dots"] for r in per_b]))
            print(f"  index scores exactly 0.0 (visible (b,t,j)): {zeros}")
            print(f"  top-k boundaries (rows with > {K} visible): {rows}, with a tie across the "
                  f"boundary: {ties_at_boundary}; equal neighbours inside the picks: {ties_inside}")
            print(f"  smallest non-tie boundary gap: {min_gap:.3g}; smallest |qI.kI|: {dots.min():.3g}")
    print("self-checks passed")


if __name__ == "__main__":
    main()
