"""phasescope.layout: the phase layouts as token-id batches with their residues.

layout(preset=... | checkpoint=... | ids=dict(bos, size, keys, names, fillers), task="lookup",
protocol="prefix" | "in-sequence", samples, residues, seed) builds exactly the prompts `phasescope eval`
scores; layout(task="needle", tokenizer="tokenizer.json", context=N, residues, samples, seed) the
position-matched needle of `phasescope probe needle` in that tokenizer's tokens (vocab_size None). The lookup
prompts are: each base example at every residue r = target position mod R, the residue groups matched in the
mean and spread of the target's position. `ids` takes token ids from your own tokenizer (single-token
keys and names, neutral fillers, the BOS id and the vocabulary size V).
"""
import json

import torch

from . import _core


class Layout:
    """samples: list of dicts (id, base, residue, target_pos, answer, tokens); vocab_size; R; S."""

    def __init__(self, data):
        self.samples = data["samples"]
        self.vocab_size = data["vocab_size"]
        self.R = data["R"]
        self.S = data["S"]

    def __len__(self):
        return len(self.samples)

    def batches(self, size=16):
        """Yield (ids LongTensor [B, T], residues [B], answers [B]) over groups of equal-length prompts."""
        by_len = {}
        for s in self.samples:
            by_len.setdefault(len(s["tokens"]), []).append(s)
        for group in by_len.values():
            for i in range(0, len(group), size):
                part = group[i:i + size]
                yield (torch.tensor([s["tokens"] for s in part], dtype=torch.long),
                       torch.tensor([s["residue"] for s in part], dtype=torch.long),
                       torch.tensor([s["answer"] for s in part], dtype=torch.long))


def spec(task="lookup", protocol="prefix", samples=1152, residues=24, seed=1, preset=None, checkpoint=None,
         ids=None, pad=0, records=None, S=None, tokenizer=None, context=None, **extra):
    s = {"task": task, "protocol": protocol, "samples": int(samples), "residues": int(residues),
         "seed": int(seed), "pad": int(pad)}
    if records is not None:  # default: the preset's records (64 with ids=)
        s["records"] = int(records)
    if preset is not None:
        s["preset"] = str(preset)
    if checkpoint is not None:
        s["checkpoint"] = str(checkpoint)
    if ids is not None:
        s["ids"] = {k: (list(map(int, v)) if isinstance(v, (list, tuple)) else int(v)) for k, v in ids.items()}
    if S is not None:
        s["S"] = int(S)
    if tokenizer is not None:  # the needle, in that tokenizer's tokens
        s["tokenizer"] = str(tokenizer)
    if context is not None:
        s["context"] = int(context)
    s.update(extra)
    return s


def layout(**kwargs):
    return Layout(json.loads(_core.layout(json.dumps(spec(**kwargs)))))
