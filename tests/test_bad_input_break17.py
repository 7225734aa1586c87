"""Bad input on session 7's new readings (break17): warnings as records in a model file
(``meta.warnings_ranked``, :mod:`models.warning_record`), their ranking
(:mod:`stepsim.warning_order`: ``part_of`` chains and cycles, effects no step has) and the
gloo calibration's element counts (:func:`calibration.gloo_steps.input_numel`: the buckets'
all-reduces and their ``copy_bucket_to_grad`` copies). A record that cannot be right is
dropped and counted in a warning; a file is refused (one line, exit 2) only where nothing is
left to read."""
import gzip
import hashlib
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from stepsim.calibration.gloo_steps import COPY, input_numel
from stepsim.models.param_base import MAX_DURATION_US
from stepsim.models.params import load_model
from stepsim.models.warning_record import WarningRecord as R
from stepsim.warning_order import lines, ranked
from tests.test_quirks import cli, one_line_error

DATA = Path(__file__).parent / "data"
JOB = DATA / "gloo_loader_job"
MODEL = DATA / "ddp_demo_model.json"


def _md5(p: Path) -> str:
    return hashlib.md5(p.read_bytes()).hexdigest()


def _printed(rs) -> list[str]:
    return [x.text for x in rs]


def test_a_part_of_cycle_prints_both_warnings():
    """A model file's records a part of b and b part of a: each folded into the other, both
    marked parts, and neither printed (ranked gave ()); now neither folds, both print."""
    rs = ranked([R(text="A", kind="a", effect_us=10.0, part_of="b"),
                 R(text="B", kind="b", effect_us=3.0, part_of="a")])
    assert _printed(rs) == ["A", "B"] and not any(r.part for r in rs)
    assert [r.effect_us for r in rs] == [10.0, 3.0]
    assert len(lines(rs, 1e3)) == 2


def test_a_part_of_chain_loses_no_warning():
    """a part of b part of c: b folds into c (printed under it); a, part of a part, stands
    alone (it was printed under b, which is printed only under c: lost when b came first)."""
    for order in ([0, 1, 2], [1, 0, 2], [2, 1, 0]):
        recs = [R(text="A", kind="a", effect_us=1.0, part_of="b"),
                R(text="B", kind="b", effect_us=2.0, part_of="c"),
                R(text="C", kind="c", effect_us=4.0)]
        rs = ranked([recs[i] for i in order])
        assert sorted(_printed(rs)) == ["A", "B", "C"], order
        got = {r.text: (r.effect_us, r.part) for r in rs}
        assert got == {"C": (6.0, False), "B": (2.0, True), "A": (1.0, False)}, order


@pytest.mark.parametrize("effect", [1e308, -1e308, 2 * MAX_DURATION_US])
def test_an_effect_no_step_has_is_unsized(effect):
    """1e308 µs printed as ``[step…`` (the number ate the summary) and, two of them folded,
    summed to inf (``+inf ms``, Infinity in the JSON): past MAX_DURATION_US it is unsized."""
    rs = ranked([R(text="A", kind="a", effect_us=effect),
                 R(text="B", kind="b", effect_us=effect, part_of="a")])
    assert [r.effect_us for r in rs] == [None, None]
    assert lines(rs, 1e3) == ["warning: A", "warning: B"]
    json.dumps([r.to_dict(1e3) for r in rs], allow_nan=False)


BAD_RECORDS = [
    ('"abc"', "a str, not a list"),
    ('{"a": 1}', "a dict, not a list"),
    ('[{"kind": "k", "effect_us": 1.0}]', "record 0.text: Field required"),
    ('[{"text": "t", "effect_us": "abc"}]', "record 0.effect_us"),
    ('[{"text": "t", "effect_us": true}]', "record 0.effect_us"),
    ('[{"text": "t", "foo": 1}]', "record 0.foo"),
    ('[["t", 1]]', "record 0"),
    ('[{"text": "ok", "kind": "k", "effect_us": 5.0}, "t"]', "record 1"),
]


@pytest.mark.parametrize("stored, why", BAD_RECORDS)
def test_a_model_files_record_that_cannot_be_right_is_dropped_and_counted(tmp_path, stored,
                                                                          why):
    """One odd record refused the whole model (exit 2), though the records are optional (a
    model file without them loads): now it is dropped, the good ones kept, and one warning in
    ``meta.warnings`` counts them; the file unchanged."""
    d = json.loads(MODEL.read_text())
    d["meta"]["warnings_ranked"] = "@@"
    p = tmp_path / "m.json"
    p.write_text(json.dumps(d).replace('"@@"', stored))
    before = _md5(p)
    m = load_model(p)
    said = [w for w in m.meta.warnings if w.startswith("meta.warnings_ranked: ")]
    assert len(said) == 1 and why in said[0] and "dropped" in said[0], said
    assert [r.text for r in m.meta.warnings_ranked] == (["ok"] if "ok" in stored else [])
    assert m.meta.warnings[:-1] == d["meta"]["warnings"]
    assert _md5(p) == before


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_a_yaml_models_record_not_finite_is_dropped(tmp_path, value):
    """YAML reads ``.nan`` and ``.inf`` as floats (JSON's parser refuses NaN, one line): the
    record is dropped and counted, the model loads."""
    yaml = pytest.importorskip("yaml")
    d = json.loads(MODEL.read_text())
    d["meta"]["warnings_ranked"] = [{"text": d["meta"]["warnings"][0], "kind": "k",
                                     "effect_us": "@@"}]
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(d).replace("'@@'", value))
    m = load_model(p)
    assert m.meta.warnings_ranked == []
    assert any("record 0.effect_us" in w for w in m.meta.warnings)


def test_a_model_files_nan_json_is_one_line(tmp_path):
    """``NaN`` in the JSON (not JSON): refused in one line naming the file, exit 2, nothing
    written."""
    d = json.loads(MODEL.read_text())
    d["meta"]["warnings_ranked"] = "@@"
    p = tmp_path / "m.json"
    p.write_text(json.dumps(d).replace('"@@"', '[{"text": "t", "effect_us": NaN}]'))
    rc, err, _ = cli("simulate", p, "--steps", "2", "--warmup", "0", "--chrome-trace",
                     tmp_path / "t.json")
    one_line_error(rc, err, "m.json", "not valid JSON")
    assert not (tmp_path / "t.json").exists()


def _dims_table(dims):
    return SimpleNamespace(arg=lambda i, key, default=None: {"Input Dims": dims,
                                                            "Input type": ["float"]}[key])


@pytest.mark.parametrize("dims", [[[2**40, 2**40]], [[3037000500, 3037000500]],
                                  [[2**62 + 1, 4]], [[2**61]], [[-5]], [[0]], [[1.5, 2]]])
def test_input_dims_that_cannot_be_a_tensors_are_bad(dims):
    """numpy's int64 product wrapped [2**40, 2**40] to 0 elements, [3037000500]*2 to a
    negative size (the job refused: 'DeviceTask.bytes ... records that cannot be right') and
    [2**62 + 1, 4] to 4: each is now a size that cannot be right (None, bad)."""
    assert input_numel(_dims_table(dims), 0) == (None, "float", True)


def test_input_dims_of_a_real_bucket_read_exactly():
    assert input_numel(_dims_table([[10, 1024]]), 0) == (10240, "float", False)
    assert input_numel(_dims_table(None), 0) == (None, "float", False)


def test_a_jobs_odd_input_dims_calibrate_with_a_warning(tmp_path):
    """Rank 0's copies with Input Dims [[-5]] and its all-reduces with [[3037000500,
    3037000500]] (wrapped negative by int64: the job was refused): the job calibrates, the
    all-reduces sized from DDP's record, the copies counted in one warning (64 of 64), the
    files unchanged."""
    dst = tmp_path / "job"
    shutil.copytree(JOB, dst)
    f = dst / "rank0" / "trace.json.gz"
    t = json.loads(gzip.decompress(f.read_bytes()))
    for e in t["traceEvents"]:
        if e.get("name") == COPY:
            e["args"]["Input Dims"] = [[-5]]
        elif e.get("name") == "gloo:all_reduce":
            e["args"]["Input Dims"] = [[3037000500, 3037000500]]
    f.write_bytes(gzip.compress(json.dumps(t).encode()))
    before = {p: _md5(p) for p in dst.rglob("*") if p.is_file()}
    rc, err, _ = cli("calibrate", dst, "-o", tmp_path / "m.json", "--verbose")
    assert rc == 0 and "Traceback" not in err, err
    ws = json.loads((tmp_path / "m.json").read_text())["meta"]["warnings"]
    copies = [w for w in ws if COPY in w]
    assert len(copies) == 1 and "64 of 64" in copies[0], copies
    assert any("past 2**60 elements" in w for w in ws)
    assert before == {p: _md5(p) for p in dst.rglob("*") if p.is_file()}


@pytest.mark.parametrize("walls", [[[10.0, 10.0], [0.0, 5.0]], [[10.0, 10.0], [-1.0, 5.0]],
                                   [[10.0, 10.0], [float("nan"), 5.0]],
                                   [[10.0, 10.0], [float("inf"), 5.0]]])
def test_a_runs_wall_not_above_0_gives_no_wall_factors(walls):
    """Only the first run's walls were checked: a later run's 0 gave a factor 0.0, a negative
    one NaN (the host noise the interval draws from NaN); now no factors, as for a run without
    steps."""
    from stepsim.calibration.job_runs import wall_factors

    assert wall_factors(walls) == []


def test_a_timed_reruns_steps_out_of_order_leave_the_demo_model_as_it_was():
    """A timed re-run whose step starts go back in time (mean start-to-start −1 µs) made
    ``host.wall_runs`` hold NaN; now the model is left as it was."""
    from stepsim.demo.ddp_noise import with_remeasured_walls

    model = load_model(MODEL)
    back = [{"step_starts_us": [3.0, 2.0, 1.0]}] * 2
    got_model, got = with_remeasured_walls(model, JOB, [back])
    assert got == [] and got_model is model
