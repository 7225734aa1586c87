"""Progress on stderr while a verb simulates: a live rich bar on a terminal, plain lines on
anything else (a log, a pipe), none with ``--json`` or ``--quiet``.

A terminal gets :mod:`rich`'s transient bar (description, bar, done of total, time elapsed),
which leaves nothing behind. Anything else cannot take a redrawn line (a log would collect
its carriage returns and escapes), so it gets a plain line, ``progress: baseline 4 of 16 (45 s)``,
only once :data:`LINE_FIRST_S` seconds have passed and then at most every
:data:`LINE_EVERY_S`, plus one when the work ends if a line was written: a quick run writes
nothing, and a log stays readable. fresh11 (2026-12-07) waited 71–770 s for ``whatif`` and
420 s for ``plan`` on a loaded 2-core host, its output going to a log, with nothing printed.
"""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TextIO

__all__ = ["LINE_FIRST_S", "LINE_EVERY_S", "progress_bar", "line_progress"]

LINE_FIRST_S = 30.0
"""Seconds after which a non-terminal's first progress line is written (a run shorter than
this writes none: the tests' and scripts' stderr stays the warnings alone)."""
LINE_EVERY_S = 60.0
"""Least seconds between two progress lines on a non-terminal."""


def line_progress(description: str, out: TextIO | None = None,
                  clock: Callable[[], float] = time.monotonic) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` hook writing plain lines to ``out`` (default stderr) as the
    module docstring says; ``clock`` gives seconds (a test passes its own)."""
    start = clock()
    last: list[float] = []

    def hook(done: int, total: int) -> None:
        now = clock()
        due = now - start >= LINE_FIRST_S and (not last or now - last[-1] >= LINE_EVERY_S)
        if due or (last and done >= total and last[-1] != now):
            last.append(now)
            print(f"progress: {description} {done} of {total} ({now - start:.0f} s)",
                  file=out if out is not None else sys.stderr, flush=True)
    return hook


@contextmanager
def progress_bar(description: str, enabled: bool = True) -> Iterator:
    """A ``progress(done, total)`` hook: a rich progress bar on stderr where stderr is a
    terminal, :func:`line_progress` where it is not; None when disabled (``--json``,
    ``--quiet``)."""
    if not enabled:
        yield None
        return
    if not sys.stderr.isatty():
        yield line_progress(description)
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)   # here: a run without a bar skips 13 modules

    bar = Progress(TextColumn(description), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=Console(file=sys.stderr), transient=True)
    task = bar.add_task(description, total=None)
    with bar:
        yield lambda done, total: bar.update(task, completed=done, total=total)
