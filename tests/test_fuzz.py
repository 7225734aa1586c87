"""Fuzzing ``stepsim calibrate``: seeded mutations of real traces (``../shared/traces``, when
present) and of the small synthetic fixtures of the quirk tests, each run through the CLI. A
case passes when it calibrates (exit 0) or is refused with exactly one line on stderr (exit 2),
never a traceback, within a time bound. Most cases run in this process (fast); a sample runs
as a user does, in a subprocess with a timeout."""
from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, shared_traces
from tests.kineto_gen import one_rank_trace
from tests.test_quirks import cli, legacy_trace

CASE_S = 60.0
"""Most seconds one case may take (a subprocess is killed then)."""
ODD_VALUES = (-1, -1e300, 1e300, 10**30, "", "x", "12", None, True, [], {}, [1, [2]], {"a": 1},
              "NaN", 0.5, 2**63)
FIELDS = ("ts", "dur", "pid", "tid", "ph", "cat", "name", "args", "id")
ARG_KEYS = ("correlation", "External id", "stream", "device", "bytes", "Collective name")


def _odd(rng: random.Random):
    return rng.choice(ODD_VALUES)


def mutate(events: list, rng: random.Random) -> tuple[str, bytes]:
    """One mutation of ``events`` (not changed): its name and the mutated file's bytes."""
    ev = json.loads(json.dumps(events))
    kind = rng.choice(("field", "arg", "drop", "duplicate", "shuffle", "truncate", "flip",
                       "wrap", "shift"))
    if kind == "field":
        for e in rng.sample(ev, min(len(ev), rng.choice((1, 3, 30)))):
            e[rng.choice(FIELDS)] = _odd(rng)
    elif kind == "arg":
        for e in rng.sample(ev, min(len(ev), 20)):
            if isinstance(e.get("args"), dict):
                e["args"][rng.choice(ARG_KEYS)] = _odd(rng)
    elif kind == "drop":
        frac = rng.choice((0.01, 0.2, 0.9))
        ev = [e for e in ev if rng.random() > frac]
    elif kind == "duplicate":
        ev += [dict(e) for e in rng.sample(ev, min(len(ev), 50))]
    elif kind == "shuffle":
        rng.shuffle(ev)
    elif kind == "shift":   # one event's time far away (a corrupt timestamp)
        e = rng.choice(ev)
        e["ts"] = (e.get("ts") or 0) + rng.choice((-1, 1)) * rng.choice((1e6, 1e12, 1e17))
    data = json.dumps(ev if kind != "wrap" else {"traceEvents": {"not": "a list"}}).encode()
    if kind == "truncate":
        data = data[:rng.randrange(1, len(data))]
    elif kind == "flip":
        b = bytearray(data)
        for _ in range(rng.choice((1, 10))):
            b[rng.randrange(len(b))] = rng.randrange(256)
        data = bytes(b)
    return kind, data


def _events(path: Path) -> list:
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return data["traceEvents"] if isinstance(data, dict) else data


def _check(rc: int, err: str, where: str) -> None:
    assert "Traceback" not in err, f"{where}: {err}"
    assert rc in (0, 2), f"{where}: exit {rc}: {err}"
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("stepsim: error: "), f"{where}: {err}"


def _cases(tmp_path: Path, sources: list[Path], per_source: int, seed: int):
    rng = random.Random(seed)
    for src in sources:
        events = _events(src)
        for k in range(per_source):
            kind, data = mutate(events, rng)
            p = tmp_path / f"{src.name.split('.')[0]}_{k}_{kind}.json"
            p.write_bytes(data)
            yield p


def _fixtures(tmp_path: Path) -> list[Path]:
    d = tmp_path / "fixtures"
    d.mkdir()
    return [one_rank_trace(d / "standard.json"), legacy_trace(d / "legacy.json"),
            legacy_trace(d / "legacy_gpu.json", gpu=True)]


def _run_in_process(cases) -> int:
    n = 0
    for p in cases:
        t0 = time.monotonic()
        rc, err, _ = cli("calibrate", p, "-o", p.with_suffix(".model.json"))
        _check(rc, err, p.name)
        assert time.monotonic() - t0 < CASE_S, f"{p.name}: took over {CASE_S} s"
        n += 1
    return n


def test_fuzzed_synthetic_traces(tmp_path):
    assert _run_in_process(_cases(tmp_path, _fixtures(tmp_path), per_source=12, seed=9)) == 36


def test_fuzzed_real_traces(tmp_path):
    root = shared_traces()
    small = sorted((p for p in root.rglob("*.json*") if p.is_file()),
                   key=lambda p: p.stat().st_size)[:2]
    assert _run_in_process(_cases(tmp_path, small, per_source=3, seed=11)) == 6


def test_fuzzed_traces_in_a_subprocess(tmp_path):
    """A sample as a user runs it: a process of its own, killed after ``CASE_S``."""
    for p in list(_cases(tmp_path, _fixtures(tmp_path), per_source=1, seed=5))[:2]:
        r = subprocess.run([sys.executable, "-m", "stepsim", "calibrate", str(p), "-o",
                            str(p.with_suffix(".model.json"))], capture_output=True, text=True,
                           cwd=REPO, timeout=CASE_S)
        _check(r.returncode, r.stderr, p.name)

