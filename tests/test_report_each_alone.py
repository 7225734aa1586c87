"""report makes one what-if of each operation alone; one that does not apply alone is refused
before any simulation, saying so and how to combine them (a fresh user, 2026-12-05:
``report --set loader.num_workers=2 --fix intra_op_threads`` was refused after 3 s with only
"0 DataLoader thread(s) fit the 2 cores", which read as if the --set had been ignored)."""
import pytest

from stepsim import api
from stepsim.simcore.errors import NotApplicable
from tests.test_threads_fix import _captured


def test_an_op_that_needs_another_is_refused_with_the_way_to_combine(tmp_path):
    out = tmp_path / "r.html"
    with pytest.raises(NotApplicable, match=r"fit the 2 cores.*one what-if of each operation "
                                            r"alone.*--scenario file"):
        api.report(_captured(0, 60.0), [("set", "loader.num_workers=2"),
                                        ("fix", "intra_op_threads")], output=out, steps=20,
                   warmup=5, draws=0, jobs=1)
    assert not out.exists()


def test_the_combination_in_one_scenario_file_applies(tmp_path):
    sc = tmp_path / "both.yaml"
    sc.write_text("ops: [{op: set, path: loader.num_workers, value: 2}, "
                  "{op: fix, name: intra_op_threads}]\n")
    w = api.whatif(_captured(0, 60.0), scenario=str(sc), steps=20, warmup=5, draws=0, jobs=1)
    assert w.scenario.model.loader.num_workers == 2
    assert [op.threads for op in w.scenario.model.host.ops if op.kind == "cpu"] == [1]
