"""``simulate --plot F --measured DIR`` accepts a capture folder as the other verbs do."""
from stepsim.views import measured_timeline


def test_measured_lanes_from_a_capture_folder(cpu_run_nw0):
    t = measured_timeline(cpu_run_nw0)
    assert t.spans and "trace.json.gz" in t.title
