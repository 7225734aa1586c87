"""Per setting and rank of a kept DDP demo folder: each phase predicted against measured
(ms), so a row's error is located (:mod:`demo.ddp_phases`). No timing of its own:
``python bench/ddp_phase_errors.py DEMO_DIR...``."""
from __future__ import annotations

import sys
from pathlib import Path

import orjson

from stepsim.demo.ddp import SETTINGS
from stepsim.demo.ddp_phases import breakdown, format_breakdown
from stepsim.models.params import load_model


def main(dirs: list[str]) -> None:
    for d in dirs:
        runs = orjson.loads((Path(d) / "runs.json").read_bytes())
        model = load_model(Path(d) / "model.json")
        print(d)
        print("\n".join(format_breakdown(breakdown(model, runs, SETTINGS))))


if __name__ == "__main__":
    main(sys.argv[1:])
