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
