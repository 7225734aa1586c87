"""diagnose on a job's capture folder of rank folders (rank0/, rank1/, each a capture with
trace.json.gz) reads the first rank's trace for the roofline and memory profile (fresh14: "no
roofline: no trace file in the folder" beside two traces)."""
from __future__ import annotations

from stepsim.diagnosis import _trace_file


def test_a_folder_of_rank_folders_reads_the_first_ranks_trace(tmp_path):
    for r in (1, 0):
        (tmp_path / f"rank{r}").mkdir()
        (tmp_path / f"rank{r}" / "trace.json.gz").write_bytes(b"")
        (tmp_path / f"rank{r}" / "sidecar.json").write_text("{}")
    assert _trace_file(tmp_path) == tmp_path / "rank0" / "trace.json.gz"
    assert _trace_file(tmp_path / "rank1") == tmp_path / "rank1" / "trace.json.gz"
    (tmp_path / "empty").mkdir()
    assert _trace_file(tmp_path / "empty") is None
