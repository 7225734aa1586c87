"""``diagnose MODEL --plot F`` cannot draw a roofline (a model holds no kernel shapes, a CPU
model no device work): it says so in one warning line, with the reason, instead of writing
nothing and saying nothing; without --plot nothing is said."""
from __future__ import annotations

from stepsim import api
from stepsim.models.params import save_model
from tests.conftest import run_cli
from tests.test_planner import cpu_model, rich_model

FAST = ("--steps", "5", "--warmup", "2", "--draws", "0", "--jobs", "1")


def test_a_cpu_model_says_why_there_is_no_plot(tmp_path):
    save_model(cpu_model(), tmp_path / "m.json")
    r = run_cli("diagnose", str(tmp_path / "m.json"), "--plot", str(tmp_path / "r.png"), *FAST)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "r.png").exists()
    assert r.stderr.splitlines() == ["warning: no roofline plot: the model has no device work "
                                     "(a CPU run): the step is host work"]
    assert "no roofline: the model has no device work" in r.stdout


def test_a_gpu_model_says_to_give_the_trace(tmp_path):
    d = api.diagnose(rich_model(), plot=tmp_path / "r.png", steps=5, warmup=2, draws=0, jobs=1)
    assert d.warnings == ("no roofline plot: a model has no kernel shapes (give the trace)",)
    assert not (tmp_path / "r.png").exists()
    assert api.diagnose(rich_model(), steps=5, warmup=2, draws=0, jobs=1).warnings == ()
