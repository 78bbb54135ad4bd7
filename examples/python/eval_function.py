"""Evaluate a model given only as a Python function, by phase.

The "model" here is a plain function: it answers the lookup by finding the query key's earlier
occurrence in the prompt and returning the token after it, except when that occurrence sits on phase 7
of an 8-token grid, where it guesses. phasescope.evaluate finds exactly that: period 8, the worst
residues at 7, 15 and 23. Replace `score_fn` with your model (anything that maps ids [B, T] to
next-token log-probabilities [B, V]).

    PYTHONPATH=python /usr/bin/python3 examples/python/eval_function.py [--samples 1152]
"""
import argparse

import torch

import phasescope

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=1152)
args = parser.parse_args()

V = phasescope.layout(preset="w8s8-1kv", samples=48, residues=24).vocab_size


def score_fn(ids):
    """ids [B, T] -> log-probabilities [B, V] of the next token."""
    out = torch.full((ids.shape[0], V), -20.0)
    for b, row in enumerate(ids.tolist()):
        query = row[-1]
        where = max(i for i in range(len(row) - 1) if row[i] == query)  # the target key
        answer = row[where + 1] if where % 8 != 7 else row[1]           # phase 7: a wrong guess
        out[b, answer] = 0.0
    return torch.log_softmax(out, dim=-1)


res = phasescope.evaluate(score_fn, preset="w8s8-1kv", protocol="prefix", samples=args.samples)
print(res.table())
print(res)
