"""Warnings a user can read (stepsim.warning_order): each headed by a one-line summary, the
ones that change the step first, largest effect first, the noted last, one line each; every
text kept whole. The summaries, effects and notes are the records the calibration modules
write (stepsim.models.warning_record), built here by those modules; no text is read."""
from __future__ import annotations

import re

import pytest

from stepsim.calibration.gloo_loader import rank_loader
from stepsim.calibration.profiler_overhead import OverheadFactor, step_factor_note
from stepsim.calibration.sidecar import Sidecar
from stepsim.calibration.step_tail import step_tail
from stepsim.cli import _warn
from stepsim.calibration.page_faults import Refault
from stepsim.models.warning_record import prior_said, said
from stepsim.warning_order import SUMMARY_CHARS, lines, printed_texts, rank_one, ranked, summary_of

WINDOW = [20e3, 22e3, 18e3, 21e3, 19e3, 20e3, 23e3, 17e3]      # µs, mean 20 ms


def _side(after: list[float], window=WINDOW, workers: int = 0) -> Sidecar:
    """``workers`` workers and no produce records: a start-up step, ``window`` profiled, then
    ``after`` unprofiled walls (µs), each 1 ms in next() (tests/test_step_tail.py's)."""
    rows, t = [], 1e6
    for k, w in enumerate([50e3] + list(window) + list(after)):
        prof = 1 <= k <= len(window)
        rows.append({"t_start_us": t, "wall_us": w, "cpu_us": w - 500.0, "next_wall_us": 1e3,
                     "next_cpu_us": 500.0, "profiled": prof, "profiler_on": prof})
        t += w + 100.0
    return Sidecar.model_validate({"stepsim_sidecar": 1, "loader": {"num_workers": workers},
                                   "host_cores": 2, "steps": rows})


WINDOW_SPEED = ("the host ran at 1.230× the run's CPU time of identical work (a batch's produce) "
                "in the profiled window: the model's durations are the window's, and "
                "predictions take the mean speed of the capture's whole run and its 1 "
                "replicate(s) against the window (host.cpu_scale 0.787, measured)")
PRIOR = prior_said("co-run interference not calibrated (no probe in the capture): a prior of 0–0.16 (the "
         "slowdown with every other core busy) widens the interval of any what-if that changes "
         "the co-runners (capture with probe_workers=N to calibrate it)", "host.interference",
                   "co-run interference", 0, 0.16)
UNKNOWN = ("host cores unknown: assumed 2 (one per rank on a host); a capture sidecar records "
           "them, and this sentence runs on past the summary's length to be cut at its clause")


def _tail_text() -> tuple[str, float]:
    after = [60e3 if k % 4 == 3 else WINDOW[k % 8] for k in range(32)]
    tail = step_tail(_side(after), 19e3)
    return tail.describe(), tail.shift_us


def _faults(share: float | None = 0.2):
    """newuser4's page faults (32.8 ms of CPU) as calibration.page_faults writes them."""
    f = Refault(max_faults=12792, per_fault_us=2.56, per_fault_source="system CPU per "
                   "fault, the kernel's part only", fault_free_us=224.2e3, unprofiled_us=232.2e3,
                   n=42, touched_faults=12792)
    return f.describe(share), f.refault_us


def test_step_changes_come_first_largest_first_then_unsized_then_noted():
    """The page faults' share × their CPU (0.2 × 32.7 ms) above nothing; the window speed's
    effect (set by its caller) holds the step-tail's (one cause: the window is not its run),
    which is printed under it as its part; the unsized keeps its place after them; the prior
    is noted, last."""
    tail, shift = _tail_text()
    faults, cpu = _faults(0.2)
    window = said(WINDOW_SPEED, "window_speed", "profiled window ran ×1.230", effect_us=-40e3)
    rs = ranked([PRIOR, faults, UNKNOWN, tail, window])
    assert [r.text for r in rs] == [WINDOW_SPEED, tail, faults, UNKNOWN, PRIOR]
    assert rs[0].effect_us == pytest.approx(-40e3 + shift) and rs[1].part
    assert rs[1].effect_us == pytest.approx(shift)
    assert rs[2].effect_us == pytest.approx(0.2 * cpu)
    assert rs[3].effect_us is None and not rs[3].noted
    assert rs[4].noted and rs[4].effect_us is None
    assert all(len(r.summary) <= SUMMARY_CHARS for r in rs)
    out = lines(rs)
    assert out[2].startswith("warning: [part of the above] profiled window 20.00 ms a step")
    assert sum("[step " in x for x in out) == 2           # the window's (with its part), faults'


def test_a_part_without_its_cause_is_sized_alone():
    tail, shift = _tail_text()
    (r,) = ranked([tail])
    assert r.effect_us == pytest.approx(shift) and not r.part


def test_the_records_travel_in_the_models_json_and_an_old_file_loads_unsized():
    """``meta.warnings`` texts as before plus ``warnings_ranked``; a model file without them
    (written before the records) loads, each warning unsized, printed whole."""
    from stepsim.models.params import StepModel
    from stepsim.models.warning_record import records, settled, texts
    from tests.test_planner import cpu_model

    tail, shift = _tail_text()
    m = cpu_model()
    m = settled(m.model_copy(update={"meta": m.meta.model_copy(update={"warnings": [tail, PRIOR,
                                                                                    "plain"]})}))
    back = StepModel.model_validate_json(m.model_dump_json())
    assert back == m and back.meta.warnings == [tail, PRIOR, "plain"]
    assert [r.kind for r in records(back.meta)] == ["step_tail", "prior:host.interference", ""]
    assert [r.text for r in ranked(texts(back.meta))] == [tail, "plain", PRIOR]
    d = m.model_dump(mode="json")
    d["meta"].pop("warnings_ranked")
    old = StepModel.model_validate(d)
    assert all(not r.kind for r in records(old.meta))
    assert lines(ranked(texts(old.meta))) == [f"warning: {w}" for w in (tail, PRIOR, "plain")]


def test_the_lines_head_each_with_its_effect_and_keep_every_text():
    tail, shift = _tail_text()
    rs = ranked([PRIOR, tail])
    out = lines(rs, step_us=100e3)
    assert out[0] == f"warning: [step {shift / 1e3:+.1f} ms, {100 * shift / 100e3:+.1f} %] " \
                     f"{rs[0].summary}"
    assert out[1] == f"  {tail}"
    assert out[2].startswith("warning: noted, no effect on the step (1; each in full with "
                             "--verbose)")
    assert out[3] == ("  - co-run interference not calibrated: prior 0–0.16 widens what-ifs' "
                      "intervals")
    assert PRIOR not in "\n".join(out)
    assert f"      {PRIOR}" in lines(rs, verbose=True)


def test_a_short_warning_prints_as_before():
    """A warning within SUMMARY_CHARS that no rule notes is its own summary: one line, as the
    CLI printed it before (tests match such lines whole)."""
    w = "loader.batch_size=16 (captured at 8): the batch's work is scaled"
    assert lines(ranked([w])) == [f"warning: {w}"]


def test_an_unknown_long_warning_is_summarized_by_its_first_clause():
    s = summary_of(UNKNOWN)
    assert s == "host cores unknown: assumed 2 (one per rank on a host)"
    assert rank_one(UNKNOWN).effect_us is None
    long = "word " * 60
    cut = summary_of(long.strip())
    assert len(cut) <= SUMMARY_CHARS and cut.endswith("…")


def test_a_file_prefix_stays_on_the_summary():
    """grouped_warnings' ``name: text`` (a folder of ranks) keeps the file it is about."""
    from stepsim.models.warning_record import of, retexted
    from stepsim.views import grouped_warnings

    ws = of([retexted(PRIOR, f"rank{k}/sidecar.json: {PRIOR}") for k in (0, 1)])
    (w,) = grouped_warnings(ws)
    r = rank_one(w)
    assert r.noted and r.summary.startswith("rank0/sidecar.json and 1 other file(s): co-run")


def test_the_profiler_note_is_sized_on_the_training_step_and_says_its_factors_apart():
    """step_factor_note's two factors in two sentences (a fresh user read them as one); the
    effect is the training step's duration less itself ÷ the factor."""
    f = OverheadFactor(0.9, 0.05, 72e3, 80e3, 26, 8, 78e3, 86e3)
    text = step_factor_note(0.9 * 0.97, f, 0.97)
    assert "two factors. The profiler's: " in text and ". The window's speed: 0.970" in text
    assert rank_one(text).effect_us is None                      # no step given: not sized
    text = step_factor_note(0.9 * 0.97, f, 0.97, 70e3)
    assert rank_one(text).effect_us == pytest.approx(70e3 * (1 - 1 / 0.873), rel=1e-3)


@pytest.mark.parametrize("attached", [True, False])
def test_the_ddp_loader_note_at_zero_workers_says_why(attached):
    """An attached loader at num_workers=0 has no per-batch records by design (the main thread
    makes each batch in next()); the note said "no per-batch records in the capture
    sidecar", which read as a failed capture. Noted: the produce is the measured next()."""
    warnings: list[str] = []
    side = _side([20e3] * 8) if attached else None
    lp = rank_loader(side, [1e3] * 8, 1, {}, warnings)
    assert lp.num_workers == 0
    said = [w for w in warnings if "produce time" in w]
    assert len(said) == 1 and "inferred" in said[0]
    assert ("the main thread makes each batch inside next()" in said[0]) == attached
    assert "no per-batch records" not in said[0]
    assert rank_one(said[0]).noted


@pytest.mark.parametrize("verbose", [False, True])
def test_the_cli_prints_the_ranked_lines_and_a_reader_gets_the_texts_back(capsys, verbose):
    """The CLI's lines (without a model: sized from the texts alone), and printed_texts gives
    back each warning's whole text (a noted one's summary unless verbose)."""
    tail, shift = _tail_text()
    _warn([PRIOR, tail, "short one"], verbose)
    printed = capsys.readouterr().err
    err = printed.splitlines()
    assert err[0].startswith(f"warning: [step {shift / 1e3:+.1f} ms] profiled window 20.00 ms "
                             "a step")
    assert err[1] == f"  {tail}" and err[2] == "warning: short one"
    assert err[3].startswith("warning: noted, no effect on the step (1")
    noted = PRIOR if verbose else rank_one(PRIOR).summary
    assert printed_texts("other line\n" + printed + "last\n") == [tail, "short one", noted]


def test_the_team_caveat_names_its_parameter_when_not_varied():
    """whatif's caveat said "γ 1, not varied", naming no parameter (newuser4)."""
    from tests.test_host_physics import host_model
    from stepsim.scenarios.caveats import _team_beside_workers

    m = host_model(0, 2, 5.0, 20.0, threads=2, parallel=0.8)
    said = _team_beside_workers(2, 2, 2, m)
    assert "(host.team_stall γ 1, not varied)" in said and len(said) <= 300
    r = rank_one(said)
    assert not r.noted and r.effect_us is None and re.match(r"a team of 2 threads beside 2 busy worker\(s\) on 2 cores: "
                                    r"measured ×0\.89–1\.88", r.summary)


def test_calibrations_json_adds_the_ranked_warnings_beside_the_texts():
    """``warnings`` unchanged (their order as calibrated); ``warnings_ranked`` added: summary,
    effect in ms and % of the measured step, noted, whole text, ordered."""
    from stepsim.results import Calibration
    from tests.test_planner import cpu_model

    tail, shift = _tail_text()
    m = cpu_model()
    m = m.model_copy(update={"meta": m.meta.model_copy(update={"measured_step_us": [50e3] * 4})})
    ws = (str(PRIOR), str(tail))
    d = Calibration(model=m, output=None, warnings=ws, window=None, steady_mean_us=50e3,
                    steady_median_us=50e3, ranked=ranked([PRIOR, tail])).to_dict()
    assert d["warnings"] == list(ws)
    first, second = d["warnings_ranked"]
    assert first["text"] == tail and first["effect_ms"] == pytest.approx(shift / 1e3, abs=0.006)
    assert first["effect_pct"] == pytest.approx(first["effect_ms"] * 1e3 / 50e3 * 100)
    assert not first["noted"]
    assert second == {"summary": rank_one(PRIOR).summary, "noted": True, "effect_ms": None,
                      "effect_pct": None, "text": str(PRIOR)}


def test_an_unsized_long_warning_is_said_once_whole_on_one_line():
    """A long warning no rule knows is printed whole on its one ``warning:`` line (as before
    ranking): not headed by its own first words (said twice), nor cut with its rest below (a
    phrase across the cut in neither line); ``printed_texts`` reads it back."""
    long = ("l.jsonl: skipped 1 of 2 line(s) that are not ledger records (first: line 2: not a "
            "ledger record: (record): error_pct -1 is not what predicted_mean_us and "
            "measured_mean_us give (150))")
    out = lines(ranked([long, "short one"]))
    assert out == [f"warning: {long}", "warning: short one"]
    assert printed_texts("\n".join(out)) == [long, "short one"]


def test_one_bound_on_a_host_speed_for_every_window_check():
    """models.param_meta.within_host_speed: 1/MAX_WINDOW_SPEED–MAX_WINDOW_SPEED, both ends
    in (gloo_window.beyond_speed and gloo_loader.at_loader_drift repeated it)."""
    from stepsim.calibration.gloo_window import beyond_speed
    from stepsim.models.param_meta import MAX_WINDOW_SPEED, within_host_speed

    assert within_host_speed(1 / MAX_WINDOW_SPEED) and within_host_speed(MAX_WINDOW_SPEED)
    assert not within_host_speed(0.999 / MAX_WINDOW_SPEED)
    assert not within_host_speed(1.001 * MAX_WINDOW_SPEED)

    class D:
        def __init__(self, d):
            self.d = d
    ws = [D(0.2), D(1.0), D(4.5)]
    assert [w.d for w in beyond_speed(ws)] == [0.2, 4.5]
