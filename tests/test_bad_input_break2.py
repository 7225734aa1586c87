"""Bad input found by the second breaker (2026-12-05), each refused in one line (exit 2, no
traceback) or dropped and counted."""
from __future__ import annotations

import pytest

from stepsim.models.params import save_model
from tests.test_batch_size_whatif import cpu_model
from tests.test_quirks import cli, one_line_error


@pytest.mark.parametrize("args,named", [
    (("--set", "loader.batch_size=1000000000"), "set loader.batch_size=1000000000: gives an "
                                               "invalid model: loader.produce.mean_us"),
    (("--scale", "1e300", "lane=loader"), "gives an invalid model: loader.produce.mean_us"),
])
def test_a_produce_time_past_its_bound_is_the_whatifs_error(tmp_path, args, named):
    """A batch of 10^9 samples scaled the produce time past 10^12 µs inside the transform,
    and pydantic's seven-error traceback came out (exit 1)."""
    save_model(cpu_model(0, produce_ms=40, train_ms=20, samples=True), tmp_path / "m.json")
    one_line_error(*cli("whatif", tmp_path / "m.json", *args, "--draws", "0",
                        "--steps", "5")[:2], named)


@pytest.mark.parametrize("outputs", [
    ("--plot", "{d}/p.png", "--chrome-trace", "{d}/p.png"),
    ("--plot", "{d}/p.png", "--queue-plot", "{d}/sub/../p.png"),
])
def test_two_outputs_on_one_file_are_refused(tmp_path, outputs):
    """``simulate --plot p.png --chrome-trace p.png`` wrote both, the chrome trace's JSON over
    the picture, and exit 0."""
    save_model(cpu_model(1, produce_ms=40, train_ms=20), tmp_path / "m.json")
    (tmp_path / "sub").mkdir()
    args = [a.format(d=tmp_path) for a in outputs]
    one_line_error(*cli("simulate", tmp_path / "m.json", "--steps", "5", *args)[:2],
                   args[0], args[2], "also given as", "two outputs cannot share a file")
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize("rep,named", [
    ("", "--replicate '': an empty path"),
    ("{d}/empty", "empty: a folder without sidecar.json: a replicate is a capture folder"),
])
def test_a_replicate_that_is_no_capture_says_so(tmp_path, cpu_run_nw1, rep, named):
    """Was '.: is a directory, expected a sidecar file' for an empty path, and 'is a
    directory' for a capture folder lacking its sidecar (a folder is what --replicate takes)."""
    (tmp_path / "empty").mkdir()
    one_line_error(*cli("calibrate", cpu_run_nw1, "--replicate", rep.format(d=tmp_path),
                        "-o", tmp_path / "m.json")[:2], named)
    assert not (tmp_path / "m.json").exists()
