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


def _top(module: str) -> str:
    """The project package a module path names (``stepsim.models.params`` → ``models``)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "stepsim" and len(parts) > 1 else parts[0]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {_top(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(_top(node.module))
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


@pytest.mark.parametrize("pkg", PACKAGES + ("tests", "bench"))
def test_project_imports_use_the_stepsim_namespace(pkg):
    """Inside the project every import names ``stepsim.<package>``: a bare ``models`` would be
    the user's own package in their training repository."""
    own = set(PACKAGES) | {"cli", "api"}
    for f in sorted((REPO / pkg).rglob("*.py")):
        tree = ast.parse(f.read_text(), str(f))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module
                     and node.level == 0 else [])
            bare = [n for n in names if n.split(".")[0] in own]
            assert not bare, f"{f.relative_to(REPO)}:{node.lineno} imports {bare} outside stepsim"
