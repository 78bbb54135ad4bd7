"""phasescope from PyTorch: the attention zoo and the phase evaluator inside your own code.

    import phasescope
    attn = phasescope.nn.Attention(kind="chunked", W=8, S=8, d_model=64, n_heads=4, head_dim=16)
    res = phasescope.evaluate(score_fn, preset="w8s8-1kv", protocol="prefix", samples=1152)
    print(res.mean, res.worst, res.gap, res.period)

The C++ library does the work (phasescope._core, built by scripts/build.sh against Debian's python3-torch);
this package converts. Errors are phasescope.Error (a ValueError) carrying the C++ text, which names the
field and the fix.
"""
import torch  # noqa: F401  (first: torch's own bindings must be loaded before phasescope._core's)

from . import _core
from ._core import Error
from . import nn
from .evaluate import Results, evaluate, load, read_card, read_results
from .layout import Layout, layout

__all__ = ["Error", "Layout", "Results", "evaluate", "layout", "load", "nn", "read_card", "read_results"]
