"""What a DDP demo run's processes and the whole machine used over a span, from the kernel:
each thread's CPU, run-queue wait and timeslices (``/proc/self/task/<tid>/schedstat``) and
the machine's busy and stolen CPU (``/proc/stat``, :mod:`calibration.machine_stat`), read by
:mod:`demo.ddp_job` around its timed and profiled steps and by :mod:`demo.ddp_load` to tell
outside load."""
from __future__ import annotations

from stepsim.calibration.ddp_meter import thread_deltas, thread_stats  # noqa: F401
from stepsim.calibration.machine_stat import machine_delta, machine_stat  # noqa: F401
