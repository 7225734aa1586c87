"""Imports point one way: cli (with cli_args) → api (with api_planner, api_common, results,
views, diagnosis) → demo → fit → (scenarios, calibration) → models → simcore; calibration uses
models' parameter types and simcore's utilities (:data:`CALIBRATION_USES`), never the simulator
(``fit`` runs the steps that simulate a calibrated model) nor scenarios; nothing imports cli,
nothing but cli imports cli_args, and nothing but cli and the root ``__init__`` imports api;
limits (the verbs' bounds) is below both front ends."""
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
    "demo": {"demo", "fit", "calibration", "scenarios", "models", "report", "simcore"},
}
MODULES = ("api", "api_common", "api_planner", "results", "views", "diagnosis", "limits", "cli_args",
           "fit")
"""Modules at the repository's root (``stepsim.api``, ...), between cli and the packages."""
ALLOWED |= {
    "api": {"api", "api_common", "api_planner", "results", "views", "diagnosis", "limits", "demo",
            "fit", "calibration", "scenarios", "models", "report", "simcore"},
    "api_planner": {"api_common", "results", "views", "limits", "scenarios", "models", "report",
                    "simcore"},
    "api_common": {"limits", "scenarios", "models", "report", "simcore"},
    "diagnosis": {"diagnosis", "results", "views", "fit", "calibration", "report", "scenarios",
                  "models", "simcore"},
    "fit": {"calibration", "models", "simcore"},
    "limits": {"limits", "simcore"},
    "cli_args": {"cli_args", "limits"},
    "views": {"views", "calibration", "report", "scenarios", "models", "simcore"},
    "results": {"results", "models", "report", "scenarios", "simcore"},
}
OWN = set(PACKAGES) | set(MODULES) | {"cli"}


def _files(name: str) -> list[Path]:
    """A package's Python files, or a root module's one file."""
    return [REPO / f"{name}.py"] if name in MODULES else sorted((REPO / name).rglob("*.py"))


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
        elif isinstance(node, ast.ImportFrom) and node.module == "stepsim" and node.level == 0:
            out |= {a.name for a in node.names}      # from stepsim import api
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(_top(node.module))
    return out


@pytest.mark.parametrize("pkg", PACKAGES + MODULES)
def test_import_direction(pkg):
    for f in _files(pkg):
        bad = (_imports(f) & OWN) - ALLOWED[pkg]
        assert not bad, f"{f.relative_to(REPO)} imports {sorted(bad)}"


CALIBRATION_USES = {
    # models: the parameter types, and what is closed form (no simulation)
    "stepsim.models.params", "stepsim.models.param_base", "stepsim.models.param_types",
    "stepsim.models.param_meta", "stepsim.models.param_comm", "stepsim.models.param_device",
    "stepsim.models.schema",       # a model file's schema upgrades
    "stepsim.models.warning_record",  # a warning's record (text, kind, effect, noted)
    "stepsim.models.host_speed",   # the run-to-run speed's prior and Student t interval
    "stepsim.models.load_bound",   # the outside-load bound (LOAD_WARN) and pooled load
    "stepsim.models.rank_threads",  # the ranks' intra-op threads against the host's cores (a rule)
    "stepsim.models.ddp",          # DDP's bucket rebuild and ring bytes, as reducer.cpp does it
    "stepsim.models.ddp_host",     # (ddp's) DDP's host hooks as a model transform
    "stepsim.models.bottleneck",   # the bottleneck's names and Amdahl's ceiling
    # simcore: utilities that do not simulate
    "stepsim.simcore.errors", "stepsim.simcore.files", "stepsim.simcore.parsing",
    "stepsim.simcore.atomic", "stepsim.simcore.units", "stepsim.simcore.gcpause",
    "stepsim.simcore.record",      # the Span row (measured lanes are drawn as spans)
    "stepsim.simcore.read_ahead",  # a gzip trace decompressed while the verb imports
}
"""The modules of models and simcore that calibration may import: parameter types and closed
forms, never the simulator (:mod:`models.simulate`, and what simulates through it, such as
:mod:`models.coarsen`'s probe: :mod:`stepsim.fit` runs those on calibration's output)."""


def _module_imports(path: Path) -> set[str]:
    """The full names of the project modules ``path`` imports, at its top or inside a function
    (``from stepsim.models import params`` names ``stepsim.models.params``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            pkg = (REPO / Path(*node.module.split(".")[1:])).is_dir()
            out |= ({f"{node.module}.{a.name}" for a in node.names} if pkg else {node.module})
    return {m for m in out if m.split(".")[0] == "stepsim" or m == "simpy"}


def _module_file(name: str) -> Path:
    rel = Path(*name.split(".")[1:])
    return REPO / rel / "__init__.py" if (REPO / rel).is_dir() else REPO / f"{rel}.py"


def test_calibration_imports_parameter_types_never_the_simulator():
    for f in sorted((REPO / "calibration").rglob("*.py")):
        used = {m for m in _module_imports(f) if m.split(".")[1:2] in (["models"], ["simcore"])}
        bad = used - CALIBRATION_USES
        assert not bad, (f"{f.relative_to(REPO)} imports {sorted(bad)}: calibration uses "
                         "models' parameter types, never the simulator (stepsim.fit runs it)")


def test_what_calibration_uses_never_loads_the_simulator():
    """Everything the allowed modules import in turn (their packages' ``__init__`` too) stays
    among them or in simcore, and never reaches simpy."""
    seen, todo = set(), sorted(CALIBRATION_USES)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name == "simpy":
            continue
        parts = name.split(".")
        todo += [".".join(parts[:k]) for k in range(2, len(parts))]    # the packages
        todo += sorted(_module_imports(_module_file(name)))
    models = {m for m in seen if m.startswith("stepsim.models.")}
    assert models <= CALIBRATION_USES, sorted(models - CALIBRATION_USES)
    assert "simpy" not in seen and "stepsim.models.simulate" not in seen


def test_models_never_import_calibration():
    for f in (REPO / "models").rglob("*.py"):
        assert "calibration" not in _imports(f)


@pytest.mark.parametrize("pkg", PACKAGES + MODULES + ("tests", "bench"))
def test_project_imports_use_the_stepsim_namespace(pkg):
    """Inside the project every import names ``stepsim.<package>``: a bare ``models`` would be
    the user's own package in their training repository."""
    for f in _files(pkg) + ([REPO / "cli.py", REPO / "__init__.py"] if pkg == "api" else []):
        tree = ast.parse(f.read_text(), str(f))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module
                     and node.level == 0 else [])
            bare = [n for n in names if n.split(".")[0] in OWN]
            assert not bare, f"{f.relative_to(REPO)}:{node.lineno} imports {bare} outside stepsim"


def test_only_the_cli_imports_its_arguments():
    for f in sorted(REPO.rglob("*.py")):
        rel = f.relative_to(REPO)
        if rel.parts[0] in (".venv", "tests") or rel.as_posix() == "cli.py":
            continue
        assert "cli_args" not in _imports(f), f"{rel} imports stepsim.cli_args"


def test_only_the_cli_and_the_root_import_the_api():
    for f in sorted(REPO.rglob("*.py")):
        rel = f.relative_to(REPO)
        if rel.parts[0] in (".venv", "tests") or rel.name in ("cli.py", "__init__.py", "api.py") \
                and len(rel.parts) == 1:
            continue
        assert "api" not in _imports(f), f"{rel} imports stepsim.api"
