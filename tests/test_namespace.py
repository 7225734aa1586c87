"""stepsim inside a user's training repository: one with its own ``models/`` (``metrics.py``,
``params.py``), ``calibration/``, ``report/``, ``demo/`` packages and a ``cli.py``, run from its
root with ``PYTHONPATH=.`` as ML repositories do. The training script imports the capture
harness beside its own ``models``; then the ``stepsim`` command calibrates the capture and
predicts a what-if. Done twice: against the editable install the tests run under, and against a
real (non-editable) wheel built from this repository and installed into a folder of its own.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

import stepsim
from tests.conftest import REPO

pytestmark = pytest.mark.slow

USER_FILES = {
    "models/__init__.py": "",
    "models/metrics.py": "def accuracy(logits, y):\n"
                         "    return (logits.argmax(1) == y).float().mean().item()\n",
    "models/params.py": "HIDDEN = 256\nLR = 0.1\n",
    # The user's packages that the training script does not use: importing one is a failure.
    **{f"{pkg}/__init__.py": f"raise ImportError('the user repository\\'s own {pkg}/ was "
                             "imported instead of stepsim\\'s')\n"
       for pkg in ("calibration", "report", "demo", "scenarios", "simcore")},
    "cli.py": "import sys\nprint('the user repository cli.py ran')\nsys.exit(3)\n",
    "train.py": textwrap.dedent('''\
        """The user's training loop, with stepsim's capture harness (three lines)."""
        import json
        import sys

        import torch

        from models.metrics import accuracy
        from models.params import HIDDEN, LR
        from stepsim.calibration.capture import Capture
        import stepsim.calibration.capture as harness


        class Data(torch.utils.data.Dataset):
            def __len__(self):
                return 8 * 24

            def __getitem__(self, i):
                g = torch.Generator().manual_seed(i)
                x = torch.rand(64, generator=g)
                for _ in range(30):             # some CPU work per sample
                    x = torch.tanh(x * 1.5 + x.flip(0))
                return x, i % 2


        torch.manual_seed(0)
        torch.set_num_threads(1)
        model = torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.ReLU(),
                                    torch.nn.Linear(HIDDEN, 2))
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        cap = Capture(sys.argv[1])
        loader = cap.dataloader(Data(), batch_size=8, num_workers=1)
        for x, y in cap.steps(loader, active=4, wait=1, warmup=1, skip_first=1):
            opt.zero_grad()
            logits = model(x)
            torch.nn.functional.cross_entropy(logits, y).backward()
            opt.step()
        print(json.dumps({"harness": harness.__file__, "accuracy": accuracy(logits, y)}))
        '''),
}

PROBE = ("import json, stepsim, stepsim.cli, models.metrics; print(json.dumps({"
         "'stepsim': stepsim.__file__, 'cli': stepsim.cli.__file__, "
         "'models': models.metrics.__file__}))")


def _user_repo(root: Path) -> Path:
    for rel, text in USER_FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _env(*extra: Path) -> dict:
    """The environment a user runs with: ``PYTHONPATH=.`` (then ``extra``)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([".", *map(str, extra)])
    return env


def _run(cmd: list, repo: Path, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], cwd=repo, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert "the user repository" not in r.stdout + r.stderr, (r.stdout, r.stderr)
    assert r.returncode == 0, (cmd, r.stdout, r.stderr)
    return r


def _train_calibrate_predict(repo: Path, env: dict, stepsim_cmd: list, root: Path) -> None:
    """The user's workflow in ``repo``; every stepsim module must come from ``root``."""
    probe = json.loads(_run([sys.executable, "-c", PROBE], repo, env).stdout)
    assert Path(probe["stepsim"]).parent == root, probe
    assert Path(probe["cli"]).parent == root, probe
    assert Path(probe["models"]).parent == repo / "models", probe

    out = json.loads(_run([sys.executable, "train.py", "runs/nw1"], repo, env).stdout)
    assert Path(out["harness"]).is_relative_to(root), out
    assert (repo / "runs/nw1/trace.json.gz").is_file() and (repo / "runs/nw1/sidecar.json").is_file()

    r = _run([*stepsim_cmd, "calibrate", "runs/nw1", "-o", "model.json"], repo, env)
    assert "calibrated 4 steps" in r.stdout, r.stdout
    assert json.loads((repo / "model.json").read_text())["loader"]["num_workers"] == 1
    r = _run([*stepsim_cmd, "whatif", "model.json", "--set", "loader.num_workers=2",
              "--draws", "2", "--jobs", "1", "--json"], repo, env)
    doc = json.loads(r.stdout)
    assert doc["scenario"]["what"] == "set loader.num_workers=2" and doc["speedup"] > 0
    r = _run([sys.executable, "-m", "stepsim", "fixes"], repo, env)
    assert "mixed_precision" in r.stdout


def _installed_root(cwd: Path) -> Path | None:
    """Where ``import stepsim`` resolves in a user's environment (:func:`_env`: ``PYTHONPATH``
    is the user's ``.`` alone), run from ``cwd``; None where it does not import."""
    r = subprocess.run([sys.executable, "-c", "import stepsim; print(stepsim.__file__)"],
                       cwd=cwd, env=_env(), capture_output=True, text=True, timeout=120)
    return Path(r.stdout.strip()).resolve().parent if r.returncode == 0 else None


def test_in_a_user_repository_editable(tmp_path):
    """Skips, saying why, where the tests import this checkout but the environment's editable
    install is another checkout's (a worktree run with ``PYTHONPATH`` at it): the user's
    subprocesses, whose ``PYTHONPATH`` is their ``.``, would import the other. In CI's clean
    clone the editable install is the clone, and the test runs."""
    root = Path(stepsim.__file__).resolve().parent
    if root != REPO:
        pytest.skip(f"stepsim is not installed editable from this checkout ({root})")
    installed = _installed_root(tmp_path)
    if installed is not None and installed != REPO:   # (none: the run below says why)
        pytest.skip(f"the tests import this checkout ({REPO}) through PYTHONPATH, but the "
                    f"environment's editable install is {installed}: a user's process would "
                    "run that one")
    script = Path(sys.executable).parent / "stepsim"
    cmd = [script] if script.exists() else [sys.executable, "-m", "stepsim"]
    _train_calibrate_predict(_user_repo(tmp_path / "user"), _env(), cmd, REPO)


def _source_copy(dst: Path) -> Path:
    """This checkout without its environment and build leftovers (a wheel builds in place)."""
    skip = shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__",
                                  ".pytest_cache", ".hypothesis", "stepsim-demo", "out")
    return Path(shutil.copytree(REPO, dst, ignore=skip))


def test_in_a_user_repository_from_a_wheel(tmp_path):
    pytest.importorskip("setuptools", reason="building the wheel needs setuptools (the 'test' "
                        "extra installs it)")
    wheels = tmp_path / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                        "--no-build-isolation", "-w", wheels, _source_copy(tmp_path / "src")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (wheel,) = wheels.glob("stepsim-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"stepsim", wheel.name.split("-py")[0] + ".dist-info"}, sorted(top)
    for ref in (REPO / "scenarios" / "reference").glob("*.yaml"):
        assert f"stepsim/scenarios/reference/{ref.name}" in names
    assert {"stepsim/cli.py", "stepsim/api.py", "stepsim/models/params.py"} <= set(names)
    assert not [n for n in names if n.startswith(("stepsim/tests/", "stepsim/bench/"))]

    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                        target, wheel], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    script = target / "bin" / "stepsim"
    cmd = [sys.executable, script] if script.exists() else [sys.executable, "-m", "stepsim"]
    _train_calibrate_predict(_user_repo(tmp_path / "user"), _env(target), cmd,
                             target / "stepsim")
