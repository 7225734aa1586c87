"""Write what ``stepsim calibrate`` gives for every shared trace, or compare two such folders.

``python bench/calibrate_outputs.py write OUT [ROOT]``: for each target of
``bench/calibrate_corpus.py`` (every trace file under ``ROOT``, default ``../shared/traces``,
and every folder holding several), runs ``stepsim calibrate TARGET -o OUT/NAME.model.json``
in this process and keeps its exit code, stdout and stderr in ``OUT/NAME.log``.

``python bench/calibrate_outputs.py compare A B``: the model files of ``A`` and ``B`` byte for
byte and their logs with the folder names masked; prints each that differs and the counts;
exit 1 when any differs. So a speed change is checked for identical output: write with the
code before (``git worktree add``), write with the code after, compare.
"""
from __future__ import annotations

import contextlib
import io
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate_corpus import ROOT, targets  # noqa: E402


def write(out: Path, root: Path) -> int:
    from stepsim.cli import main

    out.mkdir(parents=True, exist_ok=True)
    for p in targets(root):
        rel = str(p.relative_to(root))
        name = rel.replace("/", "__")
        o, e = io.StringIO(), io.StringIO()
        t = time.perf_counter()
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            try:
                rc = main(["calibrate", str(p), "-o", str(out / f"{name}.model.json")])
            except SystemExit as x:
                rc = x.code
        (out / f"{name}.log").write_text(f"rc={rc}\n{o.getvalue()}--stderr--\n{e.getvalue()}")
        print(f"rc={rc} {time.perf_counter() - t:5.1f} s {rel}", flush=True)
    return 0


def compare(a: Path, b: Path) -> int:
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    bad = 0
    for n in names:
        pa, pb = a / n, b / n
        if not (pa.exists() and pb.exists()):
            same = False
        elif n.endswith(".log"):
            same = (pa.read_text().replace(str(a), "OUT") == pb.read_text().replace(str(b), "OUT"))
        else:
            same = pa.read_bytes() == pb.read_bytes()
        if not same:
            bad += 1
            print(f"differs: {n}")
    models = sum(n.endswith(".model.json") for n in names)
    print(f"{len(names)} files ({models} models, the rest logs): {bad} differ")
    return 1 if bad else 0


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) >= 2 and args[0] == "write":
        return write(Path(args[1]), Path(args[2]) if len(args) > 2 else ROOT)
    if len(args) == 3 and args[0] == "compare":
        return compare(Path(args[1]), Path(args[2]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
