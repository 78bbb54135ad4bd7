"""phasescope.evaluate: the one scoring engine of phasescope with a Python callable as the backend.

score_fn(ids) takes a torch.LongTensor [B, T] of prompts, one per row, and returns a tensor [B, V] of
log-probabilities of the next token after each row's last token (V = the layout's vocab_size). Rows of
different lengths are never padded: a batch is split into equal-length groups, one call each, so every
token sits at its true absolute position. A call that raises or returns the wrong shape fails its samples
(retried later, never scored as wrong); three failing batches in a row stop the run with phasescope.Error.
With out=DIR the run writes results.json, journal.jsonl, per_residue.csv, table.txt and card.json there,
exactly as `phasescope eval` does, and resumes a killed run; without it, a temporary folder is used.
"""
import json
import shutil
import tempfile

from . import _core
from .layout import spec as _spec
from .nn import Decoder


class Results:
    """An evaluation's results.json: mean, worst, best, gap, period (P), per_residue (accuracy per residue,
    fractions), intervals (mean_ci, worst_ci, gap_ci), p_value; the whole document in .json."""

    def __init__(self, data):
        self.json = data
        self.mean = data["mean"]
        self.worst = data["worst"]
        self.best = data["best"]
        self.gap = data["gap"]
        self.period = data["period"]["P"]
        self.per_residue = [r["acc"] for r in data["per_residue"]]
        self.mean_ci = data["mean_ci"]
        self.worst_ci = data["worst_ci"]
        self.gap_ci = data["gap_ci"]
        self.p_value = data["p_value"]
        self.R = data["R"]
        self.S = data["S"]

    def table(self):
        """Accuracy per residue as text lines."""
        lines = [f"residue  accuracy   (mean {100 * self.mean:.1f}%, worst {100 * self.worst:.1f}%, "
                 f"gap {100 * self.gap:.1f} pts, period {self.period})"]
        for r, acc in enumerate(self.per_residue):
            lines.append(f"{r:7d}  {100 * acc:7.1f}%  " + "#" * int(round(40 * acc)))
        return "\n".join(lines)

    def __repr__(self):
        return (f"Results(mean={self.mean:.3f}, worst={self.worst:.3f}, best={self.best:.3f}, "
                f"gap={self.gap:.3f}, period={self.period})")


def evaluate(score_fn, task="lookup", protocol="prefix", samples=1152, residues=24, seed=1, out=None, *,
             preset=None, checkpoint=None, ids=None, pad=0, records=None, S=None, bootstrap=2000, model=None,
             fresh=False, tokenizer=None, context=None):
    """Accuracy by phase of the model behind score_fn (see the module's text). task="lookup": the layout's
    vocabulary comes from exactly one of preset=, checkpoint= or ids= (your tokenizer's ids). task="needle":
    the position-matched needle in tokenizer= (a tokenizer.json) tokens, `context` tokens per prompt (default
    2048); score_fn may return any width V above the largest token id."""
    name = model or getattr(score_fn, "__qualname__", None) or type(score_fn).__name__
    s = _spec(task=task, protocol=protocol, samples=samples, residues=residues, seed=seed, preset=preset,
              checkpoint=checkpoint, ids=ids, pad=pad, records=records, S=S, bootstrap=int(bootstrap),
              model=str(name), fresh=bool(fresh), report=False, tokenizer=tokenizer, context=context)
    tmp = None if out is not None else tempfile.mkdtemp(prefix="phasescope-evaluate-")
    try:
        text = _core.evaluate(score_fn, json.dumps(s), str(out) if out is not None else tmp)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return Results(json.loads(text))


def read_results(path):
    """A results.json (from `phasescope eval`, evaluate(out=...), a probe) as Results."""
    return Results(json.loads(_core.read_results(str(path))))


def read_card(path):
    """A phase card (card.json) as a dict, validated by the C++ reader."""
    return json.loads(_core.read_card(str(path)))


def load(checkpoint):
    """A phasescope checkpoint folder (or .safetensors) as a torch.nn.Module (phasescope.nn.Decoder)."""
    return Decoder(_core.load(str(checkpoint)))
