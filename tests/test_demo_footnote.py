"""What a new user reading the plain demo's output could not tell (newuser3, 2026-12-06): the
table's ``spread`` and ``error`` columns were not defined in its footnote, the note on loaded
settings kept in the score did not say which settings, and the host-drift line's "a width of
20 %" did not say where 20 % came from."""
from __future__ import annotations

import io
import math

from rich.console import Console

from stepsim.demo.table import kept_note, print_table, under_table
from tests.test_ledger_load_sign import _row
from tests.test_whatif_host_noise import _model


def _text(rows) -> str:
    buf = io.StringIO()
    print_table(Console(file=buf, width=400), rows, 2)
    return " ".join(buf.getvalue().split())


def test_the_footnote_defines_every_column():
    err = 100 * (229.1 - 131.4) / 131.4      # the footnote's definition: +74.4 %
    row = dict(_row(2, err, False, 0.05), spread_pct=32.0, measured_mean_ms=131.4,
               predicted_mean_ms=229.1)
    text = _text([row])
    assert "spread: the runs' mean steps, largest less smallest, over their mean" in text
    assert "error: (predicted − measured mean) / measured mean, so + is predicted slower" in text
    assert "P10–P90: an 80 % interval (8 in 10 settings' measured means should fall inside " \
        "it) of the pooled mean step" in text
    assert "measured mean (median): of every scored step of the setting's runs, pooled" in text
    # the sign the footnote states is the one the row shows: 229.1 against 131.4
    assert "229.1" in text and "131.4" in text and "+74.4 %" in text


def test_the_kept_note_names_each_loaded_setting_it_keeps():
    rows = [dict(_row(0, 76.6, False, 0.03)), dict(_row(1, 20.6, False, 0.40), calibration=True),
            _row(4, 54.6, False, 0.23), _row(8, 42.4, False, 0.374), _row(2, -20.0, True, 0.5)]
    note = kept_note(rows, 2)
    assert note.startswith("2 setting(s) were re-measured under outside load yet faster than "
                           "predicted (num_workers=4: up to 1.2x slower than the machine alone; "
                           "num_workers=8: up to 1.4x slower than the machine alone): kept")
    # quiet (0), in-sample (1) and set-apart (2) rows are not named
    assert "num_workers=0" not in note and "num_workers=1" not in note \
        and "num_workers=2" not in note
    assert "(" not in kept_note([_row(0, 5.0, False, None)], 1).split("predicted")[1][:3]


def test_the_host_drift_line_says_what_its_width_is():
    from stepsim.models.host_drift import drift_cap

    text, nums = drift_cap(_model([math.exp(x) for x in (0.0, 0.1, -0.1, 0.1, -0.1)]), 2)
    assert nums["goal_width_pct"] == 20
    assert "so a width of 20 % (the goal for the demo's median P10–P90 width, beside 80 % " \
           "coverage) holds at most 68 % of settings" in text


def test_a_loaded_capture_is_said_under_the_table():
    from tests.test_noop_whatifs import cpu_model

    m = cpu_model()
    assert [k for k, _ in under_table(m, ["num_workers=4: a note"])] == ["note"]
    m.meta.notes["outside_load_held"] = 0.57     # the new user's demo capture
    said = under_table(m, [])
    assert said and said[0][0] == "warning"
    assert "calibrated from a capture that ran under outside load (its threads advanced 1.8x " \
           "slower than alone): every prediction from it carries that run's slowdown" in said[0][1]
