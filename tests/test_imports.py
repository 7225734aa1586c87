"""Imports point one way: cli → demo → (scenarios, calibration) → models → simcore;
calibration uses models' parameter types, never scenarios; nothing imports cli."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("simcore", "models", "calibration", "scenarios", "report", "demo")
ALLOWED = {
    "simcore": {"simcore"},
    "models": {"models", "simcore"},
    "calibration": {"calibration", "models", "simcore"},
    "scenarios": {"scenarios", "models", "simcore"},
    "report": {"report", "models", "scenarios", "simcore"},
    "demo": {"demo", "calibration", "scenarios", "models", "report", "simcore"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("pkg", PACKAGES)
def test_import_direction(pkg):
    own = set(PACKAGES) | {"cli"}
    for f in sorted((REPO / pkg).rglob("*.py")):
        bad = (_imports(f) & own) - ALLOWED[pkg]
        assert not bad, f"{f.relative_to(REPO)} imports {sorted(bad)}"


def test_models_never_import_calibration():
    for f in (REPO / "models").rglob("*.py"):
        assert "calibration" not in _imports(f)
