"""Messages that say what is wrong: a fractional count (``num_workers=1e20``) must be a whole
number within its bounds; a NaN scale factor is not a number, an infinite one not finite."""
from __future__ import annotations

import pytest

from stepsim import api
from stepsim.simcore.errors import ModelError
from tests.conftest import run_cli
from tests.test_planner import cpu_model

FAST = {"steps": 5, "warmup": 2, "draws": 0, "jobs": 1}


@pytest.mark.parametrize("value", ["1e20", "4.0"])
def test_a_fractional_count_must_be_a_whole_number_within_bounds(value):
    with pytest.raises(ModelError) as e:
        api.whatif(cpu_model(), set=f"loader.num_workers={value}", **FAST)
    assert str(e.value).endswith(f"loader.num_workers: must be a whole number from 0 to 1024, not "
                                 f"{float(value)!r}")
    assert "Value error" not in str(e.value)


@pytest.mark.parametrize("factor,says", [("nan", "not a number"),
                                         ("inf", "must be a finite number >= 0"),
                                         ("-1", "must be a finite number >= 0")])
def test_a_scale_factor_says_what_is_wrong(factor, says):
    r = run_cli("whatif", "scenarios/reference/case_study.yaml", "--scale", factor,
                "category=gemm", "--draws", "0", "--steps", "5")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"stepsim: error: bad --scale factor '{factor}': {says}"]


def test_random_bytes_named_as_a_trace_say_what_they_are_not(tmp_path):
    import gzip

    import numpy as np

    noise = np.random.default_rng(0).integers(128, 256, 4000, dtype=np.uint8).tobytes()
    cases = {"r.json.gz": (noise, "not a gzip file (no gzip header) and not JSON text either"),
             "g.json.gz": (gzip.compress(noise), "not a profiler trace: the gzip data "
                                                 "decompresses to binary, not JSON text"),
             "r.json": (noise, "not a profiler trace: binary data, not JSON text")}
    for name, (data, says) in cases.items():
        (tmp_path / name).write_bytes(data)
        r = run_cli("calibrate", str(tmp_path / name), "-o", str(tmp_path / "m.json"))
        assert r.returncode == 2 and not (tmp_path / "m.json").exists()
        (line,) = r.stderr.splitlines()
        assert line.startswith(f"stepsim: error: {tmp_path / name}: {says}"), line
        assert f"(it starts with byte 0x{data[0] if 'g.' not in name else noise[0]:02x})" in line


@pytest.mark.parametrize("seed,says", [("-1", "-1 is below 0"),
                                       (str(2**32), f"{2**32} is above {2**32 - 1}, the most")])
def test_a_seed_out_of_its_32_bits(seed, says):
    r = run_cli("simulate", "scenarios/reference/case_study.yaml", "--seed", seed)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert f"argument --seed: {says}" in r.stderr
    from stepsim.limits import ArgumentError

    with pytest.raises(ArgumentError, match=f"^seed: {says}"):
        api.simulate(cpu_model(), seed=int(seed), steps=5)
    with pytest.raises(ArgumentError, match=f"^seed: {says}"):
        api.whatif(cpu_model(), set="loader.num_workers=2", seed=int(seed), **{
            k: v for k, v in FAST.items()})


def test_a_straggler_is_at_most_an_hour():
    m = "scenarios/reference/straggler.yaml"
    with pytest.raises(ModelError, match="fix straggler: ms: Input should be less than or equal "
                                         "to 3600000"):
        api.whatif(m, fix="straggler:rank=1,phase=forward,ms=1e12", **FAST)
    assert api.whatif(m, fix="straggler:rank=1,phase=forward,ms=40", **FAST).speedup < 1
