"""The fix chain: a greedy plan of named fixes, each chosen because the simulation says it
relieves the component with the largest simulated ceiling.

The chain is steered by the *largest ceiling* (:mod:`scenarios.ceiling`): the component whose
removal would shorten the step most. That is another question than the *bottleneck*, which
each prediction names by :func:`models.bottleneck.name_bottleneck` (saturated cores, a
producer that sets the pace, else the largest critical-path share), as ``whatif`` and
``simulate`` do; the two can differ (launches holding most of the critical path while a
copy's removal would gain more), so a plan reports both, each under its own name. Each round:

1. rank the components by simulated ceiling; stop when the top one's ceiling is below
   ``1 + min_gain`` (nothing left worth a move);
2. try every allowed fix that addresses it (``Fix.relieves``; a fix already applied only if
   it is repeatable), with the user's arguments or the fix's candidate arguments; for each
   fix keep the least aggressive argument within ``knee_tol`` of its best (where more stops
   helping), then keep the fix with the shortest step;
3. if none shortens the step by ``min_gain``, go down the ranking to the next component whose
   ceiling still promises ``min_gain`` (a straggler can be fixed while GEMMs dominate);
3b. if still none, look one move ahead (:func:`_pair_move`): a candidate for the top
   component that gains nothing alone may open the way for a fix of the bottleneck it leaves
   (DataLoader workers beside torch's intra-op team on too few cores stall it, and
   ``intra_op_threads`` ends the stall: a user's CNN at ``num_workers=0``, 2 cores, 2
   threads, predicted 0.98x with 2 workers alone and 1.72x with one thread beside them;
   re-measured 1.5x at 4 workers and one thread, 2026-12-05); both are taken, as two moves,
   the first marked as enabling the second;
4. apply the fix found and repeat; when no component has one, stop and say what the
   component with the largest ceiling would need: a fix of another kind (numerics,
   algorithm, hardware) if one addresses it, else a change to the algorithm or the
   parallelism.

Candidates of one round share a seed (common random numbers), so they are compared on the
change alone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from stepsim.models.params import StepModel
from stepsim.scenarios.ceiling import CeilingReport, CeilingRow, ceilings
from stepsim.scenarios.fixes import FIXES, FixKind
from stepsim.scenarios.parallel import Progress, run_many
from stepsim.scenarios.predict import Prediction, predict
from stepsim.scenarios.transforms import FixOp, Operation
from stepsim.simcore.errors import ModelError

SYSTEMS_ONLY: tuple[FixKind, ...] = ("systems",)


@dataclass(frozen=True)
class Move:
    """One step of the chain (times in µs).

    Attributes:
        op: the fix applied, with its arguments.
        relieves: the component it was chosen for (a ceiling row before the move).
        before_step_us: mean step before it.
        prediction: the model after it (with an interval when asked); its ``bottleneck`` is
            the one ``whatif`` names for the chain so far.
        largest_ceiling: the top ceiling row after it, the component the next move would
            relieve first (None: no component left).
        tried: every candidate evaluated this round, as (description, mean step µs or None
            when it did not apply).
        enables: for a move taken for the one after it (the round's look-ahead), that
            move's description; None otherwise.
    """

    op: FixOp
    relieves: CeilingRow
    before_step_us: float
    prediction: Prediction
    largest_ceiling: CeilingRow | None
    tried: tuple[tuple[str, float | None], ...]
    enables: str | None = None

    @property
    def speedup(self) -> float:
        return self.before_step_us / self.prediction.mean_step_us


@dataclass(frozen=True)
class Plan:
    """A greedy chain of fixes.

    Attributes:
        baseline: the model before any move (after the base operations); its
            ``bottleneck`` is the one ``whatif`` and ``simulate`` name.
        largest_ceiling: the top ceiling row of the baseline (the component the first move
            relieves first; None: no component).
        moves: the chain.
        stop: why it stopped, in words.
        final: the ceilings of the model after the last move.
        category_share: per device category, its busy time ÷ the final step.
    """

    baseline: Prediction
    largest_ceiling: CeilingRow | None
    moves: tuple[Move, ...]
    stop: str
    final: CeilingReport
    category_share: dict[str, float]

    @property
    def final_prediction(self) -> Prediction:
        return self.moves[-1].prediction if self.moves else self.baseline

    @property
    def speedup(self) -> float:
        return self.baseline.mean_step_us / self.final_prediction.mean_step_us

    @property
    def ops(self) -> list[FixOp]:
        return [m.op for m in self.moves]


def _try(item) -> Prediction | None:
    model, ops, steps, warmup, seed = item
    try:
        return predict(model, ops, steps=steps, warmup=warmup, seed=seed)
    except ModelError:
        return None


def _choose(cands: list[FixOp], preds: list[Prediction | None],
            knee_tol: float) -> tuple[tuple[FixOp, Prediction] | None, list[str]]:
    """(the chosen candidate, the names of the fixes that applied): per fix, the first (least
    aggressive) candidate within ``knee_tol`` of that fix's best; of those, the fastest."""
    best: dict[str, float] = {}
    for c, p in zip(cands, preds):
        if p is not None:
            best[c.name] = min(best.get(c.name, math.inf), p.mean_step_us)
    knees = [next((c, p) for c, p in zip(cands, preds) if c.name == name and p is not None
                  and p.mean_step_us <= b * (1 + knee_tol)) for name, b in best.items()]
    return min(knees, key=lambda cp: cp[1].mean_step_us, default=None), list(best)


def _candidates(model: StepModel, key: str, allow: Sequence[str], fix_args: dict[str, dict],
                done: set[str]) -> tuple[list[FixOp], list[str]]:
    """(allowed candidate ops for bottleneck ``key``, names of fixes of other kinds for it);
    fixes in ``done`` are not tried again unless repeatable."""
    ops, other = [], []
    for fix in FIXES.values():
        if key not in fix.relieves_for(model) or (fix.name in done and not fix.repeatable):
            continue
        if fix.kind not in allow:
            other.append(f"{fix.name} ({fix.kind})")
            continue
        for a in ([fix_args[fix.name]] if fix.name in fix_args else fix.candidates(model)):
            try:
                ops.append(FixOp(name=fix.name, args=a))
            except ModelError:
                continue
    return ops, other


def _stop_reason(row: CeilingRow, tried: list[str], other: list[str], min_gain: float) -> str:
    head = (f"{row.label} now has the largest ceiling (removing it entirely would give "
            f"{row.ceiling:.2f}x)")
    if tried:
        head += f"; the allowed fixes for it ({', '.join(tried)}) gain under {min_gain:.0%}"
    else:
        head += "; no allowed fix applies to it"
    if other:
        return (f"{head}. What remains needs a change of another kind: {', '.join(other)}; "
                "beyond that, changes to the algorithm or the parallelism.")
    return f"{head}. The remaining gains need changes to the algorithm, the numerics or the " \
           "parallelism."


def _next_move(model: StepModel, ops: list[Operation], report: CeilingReport,
               allow: Sequence[str], fix_args: dict[str, dict], min_gain: float,
               knee_tol: float, sim: tuple[int, int, int], jobs: int) -> tuple[tuple | None, str]:
    """One round: ``((row relieved, fix op, its prediction, candidates tried), "")`` for the
    first component in ceiling order with an allowed fix that gains ``min_gain``, else
    ``(None, why not)``."""
    before = report.baseline.mean_step_us
    done = {op.name for op in ops if isinstance(op, FixOp)}
    stop = ""
    for row in (r for r in report.rows if r.ceiling >= 1 + min_gain):
        cands, other = _candidates(report.baseline.model, row.key, allow, fix_args, done)
        preds = run_many(_try, [(model, ops + [c], *sim) for c in cands], jobs=jobs)
        chosen, applied = _choose(cands, preds, knee_tol)
        if row is report.top:
            stop = _stop_reason(row, applied, other, min_gain)
        if chosen is not None and before / chosen[1].mean_step_us >= 1 + min_gain:
            tried = tuple((c.describe(), None if p is None else p.mean_step_us)
                          for c, p in zip(cands, preds))
            return (row, chosen[0], chosen[1], tried), ""
    if len(report.rows) > 1:
        stop += " No allowed fix relieves any other component by that much either."
    return None, stop


def _pair_move(model: StepModel, ops: list[Operation], report: CeilingReport,
               allow: Sequence[str], fix_args: dict[str, dict], min_gain: float,
               knee_tol: float, sim: tuple[int, int, int], jobs: int) -> tuple | None:
    """The look-ahead round (module docstring, 3b): for the top component's candidates that
    apply but gain under ``min_gain``, each followed by the allowed fixes of the bottleneck
    it leaves; ``(row, first op, its prediction, second op, the pair's prediction, tried)``
    for the fastest pair
    that gains ``min_gain`` over the step before, else None."""
    row = report.top
    if row is None:
        return None
    best = look_ahead(model, ops, report.baseline.model, row.key, allow, fix_args, sim, jobs)
    if best is None or report.baseline.mean_step_us / best[3].mean_step_us < 1 + min_gain:
        return None
    return (row, *best)


def look_ahead(model: StepModel, ops: list[Operation], before: StepModel, key: str,
               allow: Sequence[str] = SYSTEMS_ONLY, fix_args: dict[str, dict] | None = None,
               sim: tuple = (None, 20, 0), jobs: int = 1) -> tuple | None:
    """The look-ahead (module docstring, 3b; ``diagnose`` prices it too): each allowed
    candidate for component ``key`` of ``before`` (``model`` after ``ops``), followed by each
    allowed fix of the bottleneck it leaves; ``(first op, its prediction, second op, the
    pair's prediction, tried)`` for the fastest pair, None when no pair applies. ``sim``:
    (steps, warmup, seed)."""
    fix_args = fix_args or {}
    done = {op.name for op in ops if isinstance(op, FixOp)}
    cands = _candidates(before, key, allow, fix_args, done)[0]
    firsts = [(c, p) for c, p in zip(cands, run_many(
        _try, [(model, ops + [c], *sim) for c in cands], jobs=jobs)) if p is not None]
    pairs = []
    for c, p in firsts:
        seconds = _candidates(p.model, p.bottleneck, allow, fix_args, done | {c.name})[0]
        pairs += [(c, p, d) for d in seconds if d.name != c.name]
    preds = run_many(_try, [(model, ops + [c, d], *sim) for c, _, d in pairs], jobs=jobs)
    ok = [(c, p, d, q) for (c, p, d), q in zip(pairs, preds) if q is not None]
    if not ok:
        return None
    c, p, d, q = min(ok, key=lambda x: x[3].mean_step_us)
    tried = tuple((f"{a.describe()}; {b.describe()}", None if r is None else r.mean_step_us)
                  for (a, _, b), r in zip(pairs, preds))
    return c, p, d, q, tried


def plan(model: StepModel, base: Sequence[Operation] = (), allow: Sequence[str] = SYSTEMS_ONLY,
         fix_args: dict[str, dict] | None = None, min_gain: float = 0.02,
         knee_tol: float = 0.01, max_moves: int = 8, steps: int | None = None, warmup: int = 20,
         seed: int = 0, draws: int = 0, jobs: int = 1,
         progress: Progress | None = None) -> Plan:
    """A greedy chain of named fixes (see the module docstring).

    Args:
        model: the StepModel; ``base`` operations are applied first and kept.
        allow: fix kinds the plan may use (default: systems fixes only).
        fix_args: per fix name, the arguments to use instead of its candidates
            (``{"mixed_precision": {"factor": 0.6}}``).
        min_gain: the smallest relative step reduction worth a move (0.02 = 2 %).
        knee_tol: within one fix, take the least aggressive argument within this of its best.
        max_moves: the longest chain.
        draws: Monte Carlo draws for the intervals of the baseline and of each move (0: none).
        progress: called as ``progress(round, max_moves)`` after each round.

    Raises:
        ModelError: a base op that does not apply, or a model that cannot be simulated.
    """
    fix_args = fix_args or {}
    for name, a in fix_args.items():
        FixOp(name=name, args=a)        # unknown fix or argument: fail before simulating
    sim = {"steps": steps, "warmup": warmup, "seed": seed}
    ops = list(base)
    report = ceilings(model, ops, jobs=jobs, **sim)
    baseline, first = report.baseline, report.top     # the top ceiling before any move
    moves: list[Move] = []
    stop = f"stopped after {max_moves} moves (max_moves)"
    for rnd in range(max_moves):
        if report.top is None or report.top.ceiling < 1 + min_gain:
            stop = (f"no component's removal would shorten the step by {min_gain:.0%} or more: "
                    "the step is balanced")
            break
        before = report.baseline.mean_step_us
        found, why = _next_move(model, ops, report, allow, fix_args, min_gain, knee_tol,
                                (steps, warmup, seed), jobs)
        if found is None and rnd + 2 <= max_moves:
            pair = _pair_move(model, ops, report, allow, fix_args, min_gain, knee_tol,
                              (steps, warmup, seed), jobs)
            if pair is not None:
                row, op, pred, second, both, tried = pair
                ops.append(op)
                report = ceilings(model, ops, jobs=jobs, baseline=pred, **sim)
                moves.append(Move(op, row, before, report.baseline, report.top, tried,
                                  enables=second.describe()))
                before = report.baseline.mean_step_us
                keys = FIXES[second.name].relieves
                row2 = next((r for r in report.rows if r.key in keys), report.top or row)
                found = (row2, second, both, ((second.describe(), both.mean_step_us),))
        if found is None:
            stop = why
            break
        row, op, pred, tried = found
        ops.append(op)
        report = ceilings(model, ops, jobs=jobs, baseline=pred, **sim)
        moves.append(Move(op, row, before, report.baseline, report.top, tried))
        if progress:
            progress(rnd + 1, max_moves)
    if draws > 0:
        baseline = predict(model, base, intervals=draws, jobs=jobs, **sim)
        moves = [Move(m.op, m.relieves, m.before_step_us,
                      predict(model, list(base) + [x.op for x in moves[:i + 1]],
                              intervals=draws, jobs=jobs, **sim), m.largest_ceiling, m.tried,
                      m.enables)
                 for i, m in enumerate(moves)]
    final = report.baseline
    share = {c: us / final.mean_step_us for c, us in final.summary.device_category_us.items()}
    return Plan(baseline, first, tuple(moves), stop, report, share)
