"""Warnings a user can read: each headed by a one-line summary, those whose finding changes
the predicted step first, largest effect first (ms and % of the step), then those whose effect
is not sized, then, one line each, those that change nothing on the step (a parameter's
source, a prior that widens only what-ifs' intervals).

A new user's calibration printed 11 warnings of 200–600 characters with no sign of which
mattered (newuser4, 2026-12-06: the window-speed ×0.787 and the step-tail +37 ms among
priors that change no step). The texts are unchanged and kept whole: in the model's
``meta.warnings``, the results' ``warnings``, the JSON's ``warnings_ranked`` and, for the
noted ones, behind ``--verbose``.

Each effect is read from the numbers the warning's own module wrote into it (the step-tail's
``adding +37.42 ms to the step``, the page faults' ``32.8 ms of CPU`` × the model's
``host.refault_share``) or from the model (``host.cpu_scale`` against the capture's own speed,
simulated by :func:`stepsim.api.calibrate`); a warning no rule here knows keeps its text, a
summary cut from its first clause, and no effect (not sized: it is never put among the
noted). The rules match the calibration modules' texts; ``tests/test_warning_order.py``
checks them against those modules' real output.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Iterable

SUMMARY_CHARS = 120
"""A summary's most characters (a terminal line)."""
ONE_LINE = 140
"""A warning no rule summarizes and no longer than this is its own summary and prints as one
line, as before (``--jobs 1000: ...`` is 130: a summary of it would repeat it)."""


@dataclass(frozen=True)
class Ranked:
    """One warning: ``text`` whole, ``summary`` in one line, ``effect_us`` what its finding
    changes on the predicted step (µs; None: not sized), ``noted``: it changes nothing on the
    step."""

    text: str
    summary: str
    effect_us: float | None = None
    noted: bool = False

    def effect_said(self, step_us: float | None) -> str:
        """``step +37.4 ms, +13.8 %`` (the % of the measured step, where known)."""
        ms = f"step {self.effect_us / 1e3:+.1f} ms"
        if step_us:
            ms += f", {100 * self.effect_us / step_us:+.1f} %"
        return ms

    def to_dict(self, step_us: float | None = None) -> dict:
        e = self.effect_us
        return {"summary": self.summary, "noted": self.noted,
                "effect_ms": None if e is None else e / 1e3,
                "effect_pct": None if e is None or not step_us else 100 * e / step_us,
                "text": self.text}


@dataclass(frozen=True)
class Context:
    """What the rules may read besides the text: ``refault_share`` (``host.refault_share``),
    ``scale_effect_us`` (the model's step at ``host.cpu_scale`` less at the capture's own
    speed, µs), ``train_us`` (the training step op's duration, µs)."""

    refault_share: float | None = None
    scale_effect_us: float | None = None
    train_us: float | None = None


def model_context(model, scale_effect_us: float | None = None) -> Context:
    """The :class:`Context` a StepModel gives without simulating: its
    ``host.refault_share`` and its one training-step op's duration (µs)."""
    train = [op.dur_us for op in model.host.ops if op.kind == "cpu" and op.category == "train"]
    return Context(refault_share=model.host.refault_share, scale_effect_us=scale_effect_us,
                   train_us=train[0] if len(train) == 1 else None)


def _num(s: str) -> float:
    return float(s.replace(",", ""))


Rule = Callable[[re.Match, Context], "tuple[str, float | None, bool]"]
_RULES: list[tuple[re.Pattern, Rule]] = []


def _rule(pattern: str):
    def add(fn: Rule) -> Rule:
        _RULES.append((re.compile(pattern, re.S), fn))
        return fn
    return add


@_rule(r"the profiled window is not the run's steps \(measured\): its (\d+) steps took "
       r"([\d.,]+) ms on average, the (\d+) unprofiled steps after it ([\d.,]+) ms.*?scaled "
       r"× ([\d.]+), adding ([+−-][\d.,]+) ms to the step")
def _step_tail(m, ctx):
    return (f"profiled window {m[2]} ms a step, the run after it {m[4]} ms: step work scaled "
            f"×{m[5]}", _num(m[6].replace("−", "-")) * 1e3, False)


@_rule(r"the host ran at ([\d.]+)× the run's CPU time.*\(host\.cpu_scale ([\d.]+), measured\)")
def _window_speed(m, ctx):
    return (f"profiled window ran ×{m[1]} the runs' CPU time: predictions take host.cpu_scale "
            f"{m[2]}", ctx.scale_effect_us, False)


@_rule(r"page faults \(measured\): a step re-faulted up to (\d+) pages .*?= ([\d.,]+) ms of "
       r"CPU")
def _page_faults(m, ctx):
    share = ctx.refault_share
    cpu = _num(m[2])
    return (f"step re-faults up to {cpu:g} ms of CPU: the point adds "
            f"{'a share' if share is None else f'{share:g}'} × that (the interval 0–1 ×)",
            None if share is None else share * cpu * 1e3, False)


@_rule(r"profiler overhead \(measured\): the training step's durations are the profiled "
       r"window's × ([\d.]+)")
def _profiler_step(m, ctx):
    p = float(m[1])
    eff = None if ctx.train_us is None or p <= 0 else ctx.train_us * (1 - 1 / p)
    return f"profiler overhead (measured): the training step's durations scaled ×{p:.3f}", eff, False


_TEMPLATES: list[tuple[str, str, bool]] = [
    # (pattern, summary from its groups, noted): the warnings sized by nothing
    (r"profiler overhead not removed: on (\d+) intra-op threads.*?unprofiled steps took "
     r"×([\d.]+) the profiled",
     "profiler overhead not removed ({0} intra-op threads): step kept as profiled; unprofiled "
     "ran ×{1}", True),
    (r"the (\d+) profiled steps took ([\d.]+) ms on average, the (\d+) unprofiled steps right "
     r"after them ([\d.]+) ms \(the profiled ones ([+−-]\d+) % against them\)",
     "profiled steps {1} ms, the unprofiled right after them {3} ms ({4} %): the model is of "
     "the profiled ones", False),
    (r"the host's speed varies from run to run: over (\d+) runs.*?P10–P90 is ([\d.]+)–([\d.]+)×",
     "host speed varies run to run ({0} runs): the next run's P10–P90 {1}–{2}×, in every "
     "interval", True),
    (r"^(.{5,80}?) not calibrated \(.*?a prior of ([\d.]+[–-][\d.]+)",
     "{0} not calibrated: prior {1} widens what-ifs' intervals", True),
    (r"^(the main thread's own cost of making its batches) \(.*?\) is a stated prior, "
     r"([\d.]+[–-][\d.]+) more CPU", "{0}: a stated prior, {1} more CPU, widens this interval",
     True),
    (r"^slowdown past the cores fitted from the probe at num_workers=(\d+): ([\d.]+) × .*?"
     r"draw it over ([\d.]+–[\d.]+)",
     "slowdown past the cores (host.oversub) fitted from the probe at num_workers={0}: {1}, "
     "what-ifs draw {2}", True),
    (r"^co-run interference fitted from the probe at num_workers=(\d+): ([\d.]+) slowdown "
     r"with every other core busy \(P10–P90 ([\d.]+–[\d.]+)",
     "co-run interference (host.interference) fitted from the probe at num_workers={0}: {1} "
     "(P10–P90 {2})", True),
    (r"intra-op team stall γ \(host\.team_stall\) kept at ([\d.]+) \(not varied\)",
     "intra-op team stall γ (host.team_stall) kept at {0}, not varied", True),
    (r"intra-op team spin not measured",
     "intra-op team spin not measured: it needs a 0-worker capture with the process's CPU time",
     True),
    (r"torch used (\d+) intra-op threads beside (\d+) worker\(s\) on (\d+) cores.*?"
     r"s = CPU ÷ \(\d+ × wall\) = ([\d.]+)",
     "torch's {0} intra-op threads beside {1} worker(s) on {2} cores: step modelled as "
     "parallel work (share {3})", True),
    (r"the DataLoader's produce time is the measured next\(\) time",
     "the DataLoader's produce time is its measured next() time (inferred)", True),
    (r"(\d+) produce record\(s\) left out of loader\.produce: a worker's first batch",
     "{0} produce record(s) left out: a worker's first batch (its start-up)", True),
    (r"oversubscribed intra-op threads: the training step's (\d+) beside (\d+) worker\(s\) on "
     r"(\d+) cores spin, a stall the model prices roughly; (torch\.set_num_threads\(\d+\)) "
     r"([^(]*?)(?: by |\(|$)",
     "{0} intra-op threads beside {1} worker(s) on {2} cores spin; {3} {4}", False),
    (r"a team of (\d+) threads beside (\d+) busy worker\(s\) on (\d+) cores was measured "
     r"×([\d.]+–[\d.]+) its 0-worker step",
     "a team of {0} threads beside {1} busy worker(s) on {2} cores: measured ×{3} its 0-worker "
     "step, outside this interval", False),
]
for _pat, _tpl, _noted in _TEMPLATES:
    _rule(_pat)(lambda m, ctx, tpl=_tpl, noted=_noted: (tpl.format(*m.groups()).strip(), None,
                                                        noted))


_FILE = re.compile(r"[^ :]+\.[a-z.]+(?: and \d+ other file\(s\))?: ")
"""A file name before a warning's text (:func:`stepsim.views.grouped_warnings`)."""
_DEPTH = {"(": 1, ")": -1}
MIN_CLAUSE = 40
"""A clause shorter than this is a name, not a summary (``loader.num_workers=0: ...``,
``host cores unknown: ...``): the summary runs on to the next clause."""


def summary_of(text: str) -> str:
    """A warning's first clause: up to its first ``: `` or ``; `` outside parentheses past
    :data:`MIN_CLAUSE` characters, else its first words, within :data:`SUMMARY_CHARS`; the
    whole text within :data:`ONE_LINE`."""
    if len(text) <= ONE_LINE:
        return text
    depth = 0
    for i, ch in enumerate(text[:SUMMARY_CHARS + 1]):
        depth += _DEPTH.get(ch, 0)
        if depth == 0 and i >= MIN_CLAUSE and text[i:i + 2] in (": ", "; "):
            return text[:i]
    return _cut(text)


def _cut(text: str) -> str:
    """``text`` within :data:`SUMMARY_CHARS`, cut after a word and marked ``…``."""
    if len(text) <= SUMMARY_CHARS:
        return text
    return text[:SUMMARY_CHARS - 1].rsplit(" ", 1)[0].rstrip(",;:( ") + "…"


def rank_one(text: str, ctx: Context = Context()) -> Ranked:
    """The warning ``text`` read by the first rule that matches it and whose numbers read as
    numbers, else as an unsized one; an effect that is not finite is not sized."""
    prefix = _FILE.match(text)           # the file it is about, as the text names it
    rest = text[prefix.end():] if prefix else text
    for pat, fn in _RULES:
        m = pat.search(rest)
        if m:
            try:
                summary, effect, noted = fn(m, ctx)
            except ValueError:     # a number it cannot read (``+.,``, ``1.2.3``): not this rule
                continue
            if effect is not None and not math.isfinite(effect):
                effect = None      # (``+1e308`` ms is inf µs: not sized, and valid JSON)
            return Ranked(text, _cut((prefix[0] if prefix else "") + summary), effect, noted)
    return Ranked(text, text if len(text) <= ONE_LINE else _cut(
        (prefix[0] if prefix else "") + summary_of(rest)))


def ranked(warnings: Iterable[str], ctx: Context = Context()) -> tuple[Ranked, ...]:
    """``warnings`` read (:func:`rank_one`) and ordered: sized effects, largest first; then
    the unsized, in their own order; then the noted, in theirs."""
    rs = [rank_one(w, ctx) for w in dict.fromkeys(warnings)]
    sized = sorted((r for r in rs if r.effect_us is not None and not r.noted),
                   key=lambda r: -abs(r.effect_us))
    return (*sized, *(r for r in rs if r.effect_us is None and not r.noted),
            *(r for r in rs if r.noted))


def lines(rs: Iterable[Ranked], step_us: float | None = None, verbose: bool = False
          ) -> list[str]:
    """The ``warning:`` lines of :func:`ranked`'s warnings: each headed by its summary (its
    effect on the step in brackets where sized), its whole text indented below where that is
    longer; the noted together at the end, one line each (their whole text too with
    ``verbose``)."""
    out: list[str] = []
    noted = [r for r in rs if r.noted]
    for r in rs:
        if r.noted:
            continue
        if r.effect_us is None and _is_beginning(r):
            out.append(f"warning: {r.text}")    # said once, whole, as a user may grep it
            continue
        head = r.summary if r.effect_us is None else \
            _cut(f"[{r.effect_said(step_us)}] {r.summary}")
        out.append(f"warning: {head}")
        if r.summary != r.text:
            out.append(f"  {r.text}")
    if noted:
        out.append(f"warning: noted, no effect on the step ({len(noted)}"
                   + ("" if verbose else "; each in full with --verbose") + "):")
        for r in noted:
            out.append(f"  - {r.summary}")
            if verbose and r.summary != r.text:
                out.append(f"      {r.text}")
    return out


def _is_beginning(r: Ranked) -> bool:
    """Whether an unsized warning's summary is only its text's beginning (its first clause, or
    cut and marked ``…``): then the text is printed whole on one line, as before ranking, not
    headed by its own first words. Headed, its words showed twice (the merge's CI: 7 tests
    found a once-said warning twice); headed by its beginning with the rest on the line under
    it, a phrase across the cut was in neither line (the next CI: a ledger warning's
    "error_pct -1 is not what", DDP profiler-overhead lines without their rank)."""
    core = r.summary[:-1] if r.summary.endswith("…") else r.summary
    return r.text.startswith(core)


def printed_texts(printed: str) -> list[str]:
    """Each warning's text from :func:`lines`' output among other lines (a verb's stderr): a
    header's indented detail where it has one, else the header (``warning: `` taken off); a
    noted one's summary, or its detail with ``--verbose``. What a script (or a test) that read
    one ``warning:`` line per warning reads now."""
    out: list[str] = []
    state = None        # "header": a detail may follow; "noted": inside the noted block
    for line in printed.splitlines():
        if line.startswith("warning: noted, no effect on the step ("):
            state = "noted"
        elif line.startswith("warning: "):
            out.append(line[len("warning: "):])
            state = "header"
        elif state == "header" and line.startswith("  "):
            out[-1], state = line[2:], None           # its detail
        elif state == "noted" and line.startswith("  - "):
            out.append(line[len("  - "):])
        elif state == "noted" and line.startswith("      "):
            out[-1] = line.strip()                    # a noted one's detail (--verbose)
        else:
            state = None
    return out
