"""phasescope.nn: every attention kind of phasescope's zoo as a torch.nn.Module.

Attention(kind=..., **config) takes the options of phasescope's AttnConfig (src/attention/config.h; the
keys of phasescope.nn.default_config(kind)). Its parameters are ordinary nn.Parameters of this module;
forward, backward, prefill and decode run phasescope's C++ kernels on them (the same libtorch, so
autograd flows through unchanged). Shapes: x [B, T, d_model] float32 or float64, contiguous, on the CPU,
at absolute positions pos0 .. pos0 + T - 1 (the phase of token t is t mod S).
Not thread-safe per module: each call binds the module's parameters into its C++ core.
"""
import json

import torch

from . import _core


def kinds():
    """The attention kinds: full, window, chunked, the DeepSeek kinds (ds_csa, ds_hca, ...)."""
    return list(_core.attention_kinds())


def default_config(kind):
    """The default options of `kind`, as a dict (the keys Attention accepts)."""
    return json.loads(_core.attention_default_config(kind))


class Attention(torch.nn.Module):
    def __init__(self, kind="chunked", **config):
        super().__init__()
        cfg = default_config(kind)
        for key, value in config.items():
            if key not in cfg:
                raise _core.Error(
                    f"phasescope.nn.Attention({kind!r}): unknown option {key!r}. Fix: use one of "
                    f"{', '.join(sorted(cfg))}")
            cfg[key] = value
        self._core = _core.AttentionCore(json.dumps(cfg))
        self.config = json.loads(self._core.config_json())
        self._names = list(self._core.param_names())
        for name, value in zip(self._names, self._core.initial_params()):
            self.register_parameter(name, torch.nn.Parameter(value))

    def _params(self):
        return [getattr(self, n) for n in self._names]

    def forward(self, x, pos0=0):
        """x [B, T, d_model] at positions pos0.. -> [B, T, d_model]."""
        return self._core.forward(self._params(), x, int(pos0))

    def prefill(self, x):
        """x [B, T, d_model] at positions 0..T-1 -> (y [B, T, d_model], cache): the compressed KV cache."""
        return self._core.prefill(self._params(), x)

    def decode(self, x, cache):
        """One more token per sequence: x [B, 1, d_model] at position cache.pos -> [B, 1, d_model]."""
        return self._core.decode(self._params(), x, cache)

    def extra_repr(self):
        c = self.config
        return ", ".join(f"{k}={c[k]}" for k in ("kind", "d_model", "n_heads", "n_kv_heads", "head_dim", "W", "S")
                         if k in c)


class Decoder(torch.nn.Module):
    """A phasescope checkpoint as a torch.nn.Module, for inference and evaluation (phasescope.load).

    forward(ids [B, T] long, pos0=0) -> logits [B, T, V]. Its weights are the C++ model's tensors, held as
    buffers (state_dict() reads them); train with phasescope's `train`, or with nn.Attention in your model.
    """

    def __init__(self, loaded):
        super().__init__()
        self._m = loaded
        self.preset = json.loads(loaded.preset_json())
        self.step = loaded.step
        self.hash = loaded.hash
        for name, value in loaded.named_parameters():
            self.register_buffer(name.replace(".", "__"), value.detach())

    @property
    def vocab_size(self):
        return self.preset["model"]["vocab_size"]

    def forward(self, ids, pos0=0):
        with torch.no_grad():
            return self._m.forward(ids, int(pos0))

    def score(self, ids):
        """The evaluation's score_fn: log-probabilities [B, V] of the token after each row of ids [B, T]
        (the last position's logits only, as `phasescope eval` computes them)."""
        return self._m.score(ids)
