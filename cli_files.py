"""The files and streams of a verb (:mod:`stepsim.cli`): no output written over an input it
reads, and whether stdout's reader has gone."""
from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["refuse_overwriting_inputs", "reader_gone"]

_INPUTS = ("model", "trace", "sidecar", "traces", "file", "input")
_OUTPUTS = (("output", "-o"), ("chrome_trace", "--chrome-trace"), ("save_model", "--save-model"),
            ("plot", "--plot"), ("save_scenario", "--save-scenario"), ("ledger", "--ledger"),
            ("compare", "--compare"), ("queue_plot", "--queue-plot"))


def _inputs(args) -> list[Path]:
    """Every file or folder the command reads."""
    out: list[Path] = []
    for name in _INPUTS:
        v = getattr(args, name, None)
        out += [Path(x) for x in (v if isinstance(v, list) else [v]) if x]
    out += [Path(v) for kind, v in getattr(args, "ops", None) or [] if kind == "scenario"]
    if getattr(args, "ledger", None) and args.verb != "validate":   # report, sweep: read only
        out.append(Path(args.ledger))
    measured = getattr(args, "measured", None) or []   # simulate/report: TRACE; sweep: V=TRACE
    out += [Path(m.split("=", 1)[-1]) for m in measured] if isinstance(measured, list) else [
        Path(measured)]
    return out


def refuse_overwriting_inputs(args) -> None:
    """No output over an input (:func:`simcore.outputs.refuse_overwriting_inputs`)."""
    from stepsim.simcore.outputs import refuse_overwriting_inputs as refuse

    refuse(_inputs(args), [
        (flag, getattr(args, name, None)) for name, flag in _OUTPUTS
        if name != "ledger" or args.verb == "validate"])


def reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (Linux marks its write end with
    POLLERR): a JSON document goes out in one write, which a pipe holds whole even when its
    reader only takes ten bytes and leaves, so no write fails as later ones would."""
    import select
    import stat

    try:
        fd = sys.stdout.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        poll = select.poll()
        poll.register(fd, 0)   # POLLERR is reported unasked
        return any(ev & select.POLLERR for _, ev in poll.poll(0))
    except (OSError, ValueError, AttributeError):   # no descriptor (a test's StringIO)
        return False
