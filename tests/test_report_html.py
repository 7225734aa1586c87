"""``stepsim report`` writes one self-contained HTML file that a real browser (headless
Chromium) opens without errors, showing every section with every picture decoded."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

REF = REPO / "scenarios" / "reference"
QUICK = ("--steps", "6", "--warmup", "3", "--draws", "4", "--jobs", "1")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no headless browser: the Debian package 'chromium' is not installed "
                "(.ci/run installs it)")


def _browse(html: Path, tmp_path: Path) -> tuple[str, str]:
    """The DOM after the page loaded, and the browser's stderr."""
    r = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-background-networking", "--disable-component-update",
                        "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'ud'}",
                        "--virtual-time-budget=5000", "--dump-dom", html.resolve().as_uri()],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout, r.stderr


def _check_page(html: Path, tmp_path: Path) -> str:
    from stepsim.report.html import SECTIONS

    text = html.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "http://" not in text and "https://" not in text
    dom, err = _browse(html, tmp_path)
    for sid, heading in SECTIONS:   # every section is in the rendered page, with its heading
        assert re.search(rf'<section id="{sid}"><h2>{re.escape(heading)}</h2>', dom), sid
    n = dom.count("<img ")
    m = re.search(r'data-images="(\d+)/(\d+)"', dom)
    assert m, "the page's load handler did not run"
    assert int(m.group(2)) == n >= 3 and m.group(1) == m.group(2), m.group(0)  # all decoded
    assert "Uncaught" not in err and "SyntaxError" not in err
    return dom


def test_report_of_a_reference_model_renders_in_chromium(tmp_path):
    out = tmp_path / "report.html"
    r = run_cli("report", str(REF / "input_pipeline_a.yaml"), *QUICK, "--set",
                "loader.num_workers=2", "--fix", "more_workers", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "2 what-ifs" in r.stdout and out.stat().st_size > 20_000
    dom = _check_page(out, tmp_path)
    assert "set loader.num_workers=2" in dom and "prefetch queue" in dom


def test_report_with_a_ledger_and_the_measured_lanes(cpu_run_nw0, cpu_run_nw1, tmp_path):
    """On a real CPU capture: calibrated on num_workers=0, validated at 0 and 1 (a ledger
    that sets one parameter, hence a sweep with measured points), the real trace's lanes
    drawn above the simulated baseline."""
    model, ledger = tmp_path / "m.json", tmp_path / "ledger.jsonl"
    r = run_cli("calibrate", str(cpu_run_nw0 / "trace.json.gz"), "--sidecar",
                str(cpu_run_nw0 / "sidecar.json"), "-o", str(model))
    assert r.returncode == 0, r.stderr
    for nw, run in ((0, cpu_run_nw0), (1, cpu_run_nw1)):
        r = run_cli("validate", str(model), str(run / "trace.json.gz"), "--set",
                    f"loader.num_workers={nw}", "--ledger", str(ledger), *QUICK)
        assert r.returncode == 0, r.stderr
    out = tmp_path / "r.html"
    r = run_cli("report", str(model), *QUICK, "--no-plan", "--ledger", str(ledger),
                "--measured", str(cpu_run_nw0 / "trace.json.gz"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "2 validation records" in r.stdout
    dom = _check_page(out, tmp_path)
    assert "measured: trace.json.gz" in dom and "sweep of loader.num_workers" in dom
    assert "No plan was asked for" in dom
    # the caveats name each parameter under its own source, not all in one list
    text = out.read_text(encoding="utf-8")
    assert "(inferred: " in text and "; assumed: " in text


def test_report_refuses_a_missing_ledger_in_one_line(tmp_path):
    r = run_cli("report", str(REF / "case_study.yaml"), *QUICK, "--ledger",
                str(tmp_path / "none.jsonl"), "-o", str(tmp_path / "r.html"))
    assert r.returncode == 2 and "no such ledger file" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "r.html").exists()
