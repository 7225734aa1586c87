"""The demo's progress: rich's bar on a terminal; elsewhere (a pipe: ``stepsim demo | tee
log``, a CI log) one line per step, written and flushed as the step starts, since rich's live
bar draws nothing on a non-terminal until it stops, so a piped demo said nothing for minutes."""
from __future__ import annotations

import re
import sys
import time

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


class Steps:
    """``with Steps(console, total, done_text) as steps: steps.start(text) ... steps.advance()``:
    ``total`` steps, each announced by :meth:`start` and finished by :meth:`advance`."""

    def __init__(self, console: Console, total: int, done_text: str):
        self.console, self.total, self.done_text = console, total, done_text
        self.done, self._t0, self._bar, self._task = 0, time.monotonic(), None, None

    def __enter__(self) -> "Steps":
        if self.console.is_terminal:
            self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                 TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                 console=self.console, transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.done_text, total=self.total)
        return self

    def start(self, text: str) -> None:
        """Step ``done + 1`` of ``total`` begins (``text`` says what it is)."""
        if self._bar is not None:
            self._bar.update(self._task, description=text)
        else:   # rich's Console flushes its file after each print
            self.console.print(f"[{self.done + 1}/{self.total}] {text} "
                               f"({time.monotonic() - self._t0:.0f} s)", markup=False)

    def advance(self) -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.advance(self._task)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=self.done_text)
            self._bar.__exit__(*exc)
        elif exc[0] is None:
            self.console.print(f"{self.done_text} ({time.monotonic() - self._t0:.0f} s)",
                               markup=False)


_WRAP_SPACES = re.compile(r"[ \t]+\n")


class _Trimmed:
    """A text file that drops the spaces rich leaves at the end of each line it wraps (a fresh
    user found the demo's first line, wrapped at 120 columns in a log, ending in a space)."""

    def __init__(self, file):
        self._file = file

    def write(self, text: str) -> int:
        return self._file.write(_WRAP_SPACES.sub("\n", text))

    def __getattr__(self, name):
        return getattr(self._file, name)


def demo_console() -> Console:
    """The plain demo's console on stdout: the terminal's width there; elsewhere (a pipe, a
    log) 120 columns, each wrapped line without trailing spaces."""
    tty = sys.stdout.isatty()
    return Console(highlight=False, width=None if tty else 120,
                   file=None if tty else _Trimmed(sys.stdout))
