"""The discrete-event core of stepsim: units, errors, seeded random streams, duration
distributions, span records and a dependency-graph executor on SimPy.

Simulated time is float microseconds everywhere (Kineto's unit); :mod:`simcore.units` holds
every conversion. Nothing here knows about DataLoaders, GPUs or traces.
"""
from stepsim.simcore.errors import InputError, ModelError, StepsimError
from stepsim.simcore.dists import Constant, Duration, Empirical, LogNormal
from stepsim.simcore.record import ListRecorder, NullRecorder, Recorder, Span
from stepsim.simcore.rng import spawn_streams
from stepsim.simcore import units

__all__ = [
    "StepsimError", "InputError", "ModelError",
    "Duration", "Constant", "LogNormal", "Empirical",
    "Span", "Recorder", "NullRecorder", "ListRecorder",
    "spawn_streams", "units",
]
