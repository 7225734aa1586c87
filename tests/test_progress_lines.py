"""Progress on stderr that a log or a pipe is not garbled by (report.progress): plain lines
on a non-terminal, none before LINE_FIRST_S, at most one each LINE_EVERY_S, one at the end
once any was written; none at all with --quiet (fresh11, 2026-12-07: 71–770 s of whatif on a
loaded host with nothing printed, its output going to a log)."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from stepsim.report.progress import LINE_EVERY_S, LINE_FIRST_S, line_progress

DATA = Path(__file__).parent / "data"


def _lines(times: list[float], total: int) -> list[str]:
    """The lines written when the hook is called at ``times`` (s after the start), the last
    call with done == total."""
    clock = iter([0.0, *times])
    out = io.StringIO()
    hook = line_progress("baseline", out=out, clock=lambda: next(clock))
    for k in range(len(times)):
        hook(k + 1 if k + 1 < len(times) else total, total)
    return out.getvalue().splitlines()


def test_no_line_on_a_quick_run():
    assert _lines([1.0, 5.0, LINE_FIRST_S - 0.1], 16) == []


def test_lines_after_the_first_wait_and_then_spaced():
    t = [10.0, LINE_FIRST_S, LINE_FIRST_S + 1, LINE_FIRST_S + LINE_EVERY_S - 1,
         LINE_FIRST_S + LINE_EVERY_S, LINE_FIRST_S + LINE_EVERY_S + 5]
    got = _lines(t, 16)
    assert got == [f"progress: baseline 2 of 16 ({LINE_FIRST_S:.0f} s)",
                   f"progress: baseline 5 of 16 ({LINE_FIRST_S + LINE_EVERY_S:.0f} s)",
                   f"progress: baseline 16 of 16 ({LINE_FIRST_S + LINE_EVERY_S + 5:.0f} s)"]
    assert all("\r" not in x and "\x1b" not in x for x in got)


def test_whatif_through_a_pipe_and_quiet():
    """The CLI as a user runs it with stderr to a pipe: no bar's escapes or carriage returns
    (a quick run writes no progress line at all); ``--quiet`` is accepted."""
    model = DATA / "ddp_demo_model.json"
    for extra in ([], ["--quiet"]):
        r = subprocess.run([sys.executable, "-m", "stepsim", "whatif", str(model), "--set",
                            "comm.bucket_cap_mb=1", "--draws", "2", *extra],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert "\r" not in r.stderr and "\x1b" not in r.stderr
        assert "mean ms" in r.stdout
