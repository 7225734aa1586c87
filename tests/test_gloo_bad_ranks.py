"""Rank files that cannot be one gloo job: a copied sidecar claiming another rank, a rank whose
collectives were all dropped as impossible records, a rank from another run, a missing rank.
Each is refused in one line naming the file (exit 2), or, for a missing rank, calibrated with
a warning naming it; before, each calibrated silently into a wrong model."""
from __future__ import annotations

import json
import shutil

import pytest

from stepsim.fit import calibrate
from stepsim.simcore.errors import InputError
from tests.conftest import run_cli
from tests.test_gloo import _copy_capture, gloo_run  # noqa: F401  (the module's real job)


def test_two_sidecars_of_one_rank_are_refused(gloo_run, tmp_path):  # noqa: F811
    """rank1's sidecar saying rank 0: before, it replaced rank 0's own (rank 0 took rank 1's
    profiler factor and rank 1 none)."""
    d = _copy_capture(gloo_run[0], tmp_path / "dup")
    side = d / "rank1.sidecar.json"
    data = json.loads(side.read_text())
    data["ddp"]["rank"] = 0
    side.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"rank1\.sidecar\.json.*records rank 0.*rank0\.sidecar"):
        calibrate(d)


def test_a_rank_whose_collectives_were_all_dropped_is_refused(gloo_run, tmp_path):  # noqa: F811
    """Negative durations on rank 1's gloo:* events: they are dropped, which leaves rank 1
    without collectives; before, the folder fell to the CPU calibration of rank0.json alone
    ("no sidecar", no DDP at all) with exit 0."""
    d = tmp_path / "neg"
    shutil.copytree(gloo_run[0], d)
    f = d / "rank1.json"
    data = json.loads(f.read_text())
    for e in data["traceEvents"]:
        if str(e.get("name", "")).startswith("gloo:") and "dur" in e:
            e["dur"] = -100
    f.write_text(json.dumps(data))
    res = run_cli("calibrate", str(d), "-o", str(tmp_path / "m.json"))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert "rank1.json" in lines[0] and "no gloo:* collectives left" in lines[0]
    assert "negative dur" in lines[0]
    assert not (tmp_path / "m.json").exists()


def _rank1_a_minute_later(run, tmp_path):
    """A copy of the job's folder whose rank1.json is moved a minute later on the host's clock
    (rank 1 of another run of the same job): the folder and that file."""
    d = tmp_path / "later"
    shutil.copytree(run, d)
    f = d / "rank1.json"
    data = json.loads(f.read_text())
    for e in data["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += 6e7
    f.write_text(json.dumps(data))
    return d, f


def test_a_rank_from_another_run_is_refused(gloo_run, tmp_path):  # noqa: F811
    """rank1.json moved a minute later on the host's clock (another run of the same job):
    before, the collectives' median end aligned it onto rank 0 and it calibrated as one job."""
    d, _ = _rank1_a_minute_later(gloo_run[0], tmp_path)
    with pytest.raises(InputError, match=r"rank1\.json: not of the same run as rank0\.json.*"
                                         r"begin 5\d\.\d+ s after rank0\.json's end"):
        calibrate(d)


def test_a_missing_rank_is_named(gloo_run, tmp_path):  # noqa: F811
    """Only rank 0 of a 2-rank job: it calibrates (what is left can be), and says rank 1 is
    missing; before, it said nothing."""
    d = tmp_path / "one"
    shutil.copytree(gloo_run[0], d)
    for f in d.glob("rank1*"):
        f.unlink()
    model = calibrate(d)
    assert [r.rank for r in model.ranks] == [0] and model.comm.world_size == 2
    assert any("rank 1 of the job's 2 (world size) has no trace" in w
               for w in model.meta.warnings)


def test_validate_refuses_ranks_from_two_runs(gloo_run, tmp_path):  # noqa: F811
    """validate matched the ranks by step number: rank 1 of a later run stood in the job's
    steps beside rank 0 of this one (exit 0); now the same one line as calibrate's, exit 2,
    whether the ranks come as a folder or as files."""
    d, f = _rank1_a_minute_later(gloo_run[0], tmp_path)
    model = tmp_path / "m.json"
    assert run_cli("calibrate", str(gloo_run[0]), "-o", str(model)).returncode == 0
    for given in ([str(d)], [str(d / "rank0.json"), str(f)]):
        res = run_cli("validate", str(model), *given, "--ledger", str(tmp_path / "l.jsonl"))
        assert res.returncode == 2, res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "rank1.json: not of the same run as rank0.json" in lines[0]
    assert not (tmp_path / "l.jsonl").exists()


def _dims(src, dst, dims):
    """A copy of the job whose every gloo all-reduce event has ``Input Dims`` ``dims``."""
    def edit(e):
        if str(e.get("name", "")).startswith("gloo:all_reduce") and "args" in e:
            e["args"]["Input Dims"] = dims
    return _copy_capture(src, dst, edit_event=edit)


def test_input_dims_that_cannot_be_right(gloo_run, tmp_path):  # noqa: F811
    """A 10⁷ × 10⁷ all-reduce (400 TB) calibrated before into a 5.7e7 GB/s bus (exit 0); it is
    more than all the DDP record's gradients together, so refused in one line naming it. A
    dim ≤ 0 (before: the whole folder refused as an impossible model, -200 B) leaves the size
    unknown, which the DDP record's buckets then give."""
    with pytest.raises(InputError, match=r"an all-reduce of 400000000000000 B .*more than the "
                                         r"\d+ B of every gradient"):
        calibrate(_dims(gloo_run[0], tmp_path / "huge", [[10**7, 10**7]]))
    good = calibrate(gloo_run[0])
    neg = calibrate(_dims(gloo_run[0], tmp_path / "neg", [[-5, 10]]))
    assert [t.bytes for t in neg.device.streams["gloo"]] == \
        [t.bytes for t in good.device.streams["gloo"]]


def test_validate_says_when_one_rank_stands_for_the_job(gloo_run, tmp_path):  # noqa: F811
    """One rank file of a 2-rank job: scored, with a warning that the job's step (its slowest
    rank's) is not what it measured; before, nothing said so."""
    model = tmp_path / "m.json"
    assert run_cli("calibrate", str(gloo_run[0]), "-o", str(model)).returncode == 0
    res = run_cli("validate", str(model), str(gloo_run[0] / "rank0.json"),
                  "--ledger", str(tmp_path / "l.jsonl"))
    assert res.returncode == 0, res.stderr
    assert "rank 0 of a job of 2 ranks, measured alone" in res.stderr
    res = run_cli("validate", str(model), str(gloo_run[0]), "--ledger", str(tmp_path / "l.jsonl"))
    assert res.returncode == 0 and "measured alone" not in res.stderr


def test_a_dim_at_most_0_is_warned_with_its_own_reason(gloo_run, tmp_path):  # noqa: F811
    """The warning said "recorded without record_shapes" of Input Dims that were recorded, with
    a size <= 0: now it says that."""
    neg = calibrate(_dims(gloo_run[0], tmp_path / "neg", [[0, 10]]))
    said = [w for w in neg.meta.warnings if w.startswith("the all-reduces")]
    assert said and all("record_shapes" not in w for w in said), said
    assert any("Input Dims with a size <= 0" in w for w in said), said
