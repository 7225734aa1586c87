"""The README's examples run as written: its Python blocks in document order in one namespace
(the capture block records a real CPU training run into ``runs/baseline``, the re-measure block
another at 8 workers into ``runs/workers8``; the API block calibrates the first and predicts),
and the ``stepsim ...`` lines of its bash blocks as commands (calibrate, whatif, validate,
ledger), all in one fresh folder. Two kinds of block are not run here: the setup block (a new virtual
environment, the demo, the test suite), which CI runs exactly, and an outline whose code holds
``...`` placeholders (``Trainer(..., callbacks=[...])``), whose pieces have tests of their own
(tests/test_capture_*)."""
from __future__ import annotations

import ast
import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def readme_blocks() -> list[tuple[str, str]]:
    """(language, code) of every fenced block of the README, in order."""
    return BLOCK.findall((REPO / "README.md").read_text())


def is_outline(code: str) -> bool:
    """A block with ``...`` placeholders (Python's Ellipsis) outlines code; it is not meant to
    run as it stands."""
    return any(isinstance(n, ast.Constant) and n.value is Ellipsis
               for n in ast.walk(ast.parse(code)))


def _commands(code: str) -> list[list[str]]:
    """The ``stepsim ...`` lines of a bash block, as argument lists (comments dropped)."""
    return [shlex.split(line, comments=True) for line in code.splitlines()
            if line.startswith("stepsim ")]


class _Images:
    """The user's dataset the capture block names: real CPU work per sample."""

    def __len__(self):
        return 64 * 80      # batches for the block's 3 + 1 + 2 + 8 + after=50 steps

    def __getitem__(self, i):
        import torch

        g = torch.Generator().manual_seed(i)
        x = torch.rand(256, generator=g)
        for _ in range(20):
            x = torch.tanh(x * 1.5 + x.flip(0))
        return x, i % 2


def _user_loop():
    """``dataset`` and ``train_step``, the two names the README's capture block leaves to the
    user: a small real model trained on the CPU."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    calls = []

    def train_step(batch):
        calls.append(1)
        x, y = batch
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return {"dataset": _Images(), "train_step": train_step, "_calls": calls}


def test_the_readme_has_the_examples_this_test_runs():
    python = [code for lang, code in readme_blocks() if lang == "python"]
    assert sum(not is_outline(c) for c in python) >= 2 and any(_commands(c) for lang, c in readme_blocks()
                                              if lang == "bash")


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_readme_examples_run_as_written(tmp_path, monkeypatch):
    pytest.importorskip("pandas", reason="the README's API example builds a DataFrame: pandas "
                        "(the 'frames' extra) is not installed")
    monkeypatch.chdir(tmp_path)
    ns = _user_loop()
    ran = []
    for i, (lang, code) in enumerate(readme_blocks()):
        if lang == "python" and not is_outline(code):
            exec(compile(code, f"README.md block {i}", "exec"), ns)
            ran.append("python")
        for args in _commands(code) if lang == "bash" else []:
            r = subprocess.run([sys.executable, "-m", "stepsim", *args[1:]], capture_output=True,
                               text=True, timeout=600)
            assert r.returncode == 0, (args, r.stdout, r.stderr)
            assert "Traceback" not in r.stderr
            ran.append(args[1])
    assert ran == ["python", "calibrate", "whatif", "python", "validate", "ledger", "python"], ran
    assert (tmp_path / "runs/baseline/sidecar.json").is_file()
    assert (tmp_path / "runs/workers8/sidecar.json").is_file()
    # the user's path ends in a ledger holding the one validation record it scored
    assert len((tmp_path / "ledger.jsonl").read_text().splitlines()) == 1
    assert ns["cal"].model.loader.num_workers == 4 and len(ns["cal"].measured_step_us) == 8
    # each capture loop (the baseline's, the re-measure's) ran the number of steps the README
    # says it yields (after=50 counted: a new user read "yields only skip_first + wait + warmup
    # + active" as 14, newuser3)
    assert len(ns["_calls"]) == 2 * (3 + 1 + 2 + 8 + 50)
    assert "`skip_first + wait + warmup + active + after` batches" in \
        " ".join((REPO / "README.md").read_text().split()) and "64 with the `after=50` above" in \
        " ".join((REPO / "README.md").read_text().split())
    assert ns["w"].scenario.p10_step_us <= ns["w"].scenario.p90_step_us
    curve = ns["curve"]
    assert list(curve["loader.num_workers"]) == [0, 1, 2, 4, 8]
    assert (curve["mean_step_ms"] > 0).all()
