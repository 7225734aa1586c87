"""Rank files of one GPU job (``calibration.rank_combine``) are checked to be of one run, as a
gloo job's are, and ranks on other hosts or unnamed ones too (wall clocks agree within far less
than a minute): a rank file of another run was aligned on its collectives and read as one job
(exit 0); now one line naming it, exit 2."""
from __future__ import annotations

import json
import shutil

import pytest

from stepsim.calibration.same_run import OTHER_CLOCK_SLACK_NS, check_one_run
from stepsim.simcore.errors import InputError
from tests.conftest import run_cli, shared_traces


def test_other_clocks_are_compared_with_a_minute_of_slack(tmp_path):
    t = 1_694_128_201 * 10**9          # 2023, ns since the epoch
    one = [("a.json", "h1", t, t + 10**9)]
    check_one_run(one + [("b.json", "h2", t + 30 * 10**9, t + 31 * 10**9)])   # clock skew
    check_one_run(one + [("b.json", "", t, t + 10**9)])
    with pytest.raises(InputError, match=r"b\.json: not of the same run as a\.json: its events "
                                         r"begin 3599\.000 s after.*hosts 'h1' and 'h2'"):
        check_one_run(one + [("b.json", "h2", t + 3600 * 10**9, t + 3601 * 10**9)])
    with pytest.raises(InputError, match="more than 60 s apart"):
        check_one_run([("a.json", "", t, t + 10**9),
                       ("b.json", "", t + 2 * OTHER_CLOCK_SLACK_NS, t + 3 * OTHER_CLOCK_SLACK_NS)])
    # clocks since boot on two hosts cannot be compared
    check_one_run([("a.json", "h1", 10**12, 2 * 10**12), ("b.json", "h2", 9 * 10**14, 10**15)])


def test_a_gpu_rank_from_another_run_is_refused(tmp_path):
    src = shared_traces() / "param" / "dlrm_kineto"
    d = tmp_path / "dlrm"
    shutil.copytree(src, d)
    f = sorted(d.glob("worker1_*"))[0]
    data = json.loads(f.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    for e in events:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += 3600e6          # an hour later: another run of the job
    f.write_text(json.dumps(data))
    r = run_cli("calibrate", str(d), "-o", str(tmp_path / "m.json"))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f.name in lines[0] and "not of the same run" in lines[0], lines
    assert not (tmp_path / "m.json").exists()
