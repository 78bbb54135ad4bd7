"""A 2-layer model written in plain PyTorch around phasescope.nn.Attention, trained on the lookup task
and evaluated by phase.

The model: token embedding, two blocks of RMS-normalized chunked attention (W = 8, S = 8: every 8 tokens
pooled into one compressed entry, plus a 16-token exact window) and a SwiGLU MLP, tied unembedding.
Training rows are lookup prompts of phasescope's own layouts (another seed than the evaluation's), the loss
on every repeated key's name (the demonstrations and the query). Then phasescope.evaluate scores the model by the phase of the target.

    PYTHONPATH=python /usr/bin/python3 examples/python/train_lookup.py [--steps 300] [--samples 1152]
"""
import argparse

import torch

import phasescope

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--samples", type=int, default=1152)
parser.add_argument("--d-model", type=int, default=64)
parser.add_argument("--records", type=int, default=16, help="records per prompt (the paper: 64)")
args = parser.parse_args()
torch.manual_seed(0)

train = phasescope.layout(preset="w8s8-1kv", samples=4608, residues=24, seed=7, records=args.records)
V, d = train.vocab_size, args.d_model


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(d)
        self.attn = phasescope.nn.Attention(kind="chunked", W=8, S=8, d_model=d, n_heads=4, n_kv_heads=1,
                                            head_dim=d // 4, window=16)
        self.norm2 = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(2 * d, d)

    def forward(self, x):
        x = x + self.attn(self.norm1(x).contiguous())
        a, g = self.up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(a * torch.nn.functional.silu(g))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(V, d)
        torch.nn.init.normal_(self.embed.weight, std=0.02)  # tied unembedding: small logits at the start
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, ids):  # [B, T] -> logits [B, T, V]
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x)
        return self.norm(x) @ self.embed.weight.t()


def targets_of(ids, answers):
    """[B, T] next-token targets at every position whose token is a key seen before (the demonstrations and
    the query: the name that followed that key), -100 elsewhere; the query's is the answer."""
    tgt = torch.full(ids.shape, -100, dtype=torch.long)
    for b, row in enumerate(ids.tolist()):
        first = {}
        for t, tok in enumerate(row[:-1]):
            if tok in first:
                tgt[b, t] = row[first[tok] + 1]
            else:
                first[tok] = t
        tgt[b, -1] = answers[b]
    return tgt


model = Model()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
batches = [(ids, targets_of(ids, answers)) for ids, _, answers in train.batches(size=args.batch)]
for step in range(args.steps):
    ids, tgt = batches[step % len(batches)]
    logits = model(ids)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), ignore_index=-100)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if (step + 1) % 50 == 0 or step + 1 == args.steps:
        print(f"step {step + 1:4d}  loss {loss.item():.3f}")

model.eval()


@torch.no_grad()
def score_fn(ids):
    return torch.log_softmax(model(ids)[:, -1, :], dim=-1)


res = phasescope.evaluate(score_fn, preset="w8s8-1kv", protocol="prefix", samples=args.samples, seed=1,
                          records=args.records)
print(res.table())
print(res)
