"""What ``bench/issue11.py`` and the benches built on its rows share: the shared traces' paths,
the cache folder in /tmp, the Python that runs the CLI, and ``uptime``."""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
RESNET = TRACES / "kineto/34d6ad53_rec2021-01-11/resnet50_num_workers_0/worker0.pt.trace.json.gz"
LARGEST = TRACES / "hta/df_index_resolver/df_index_resolver.json.gz"
DLRM = TRACES / "param/dlrm_kineto"
CACHE = Path(tempfile.gettempdir()) / "stepsim-bench"
PY = sys.executable


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
