"""The discrete-event core of stepsim: units, errors, seeded random streams, duration
distributions, span records and a dependency-graph executor on SimPy.

Simulated time is float microseconds everywhere (Kineto's unit); :mod:`simcore.units` holds
every conversion. Nothing here knows about DataLoaders, GPUs or traces.
"""
from simcore.errors import InputError, ModelError, StepsimError
from simcore.dists import Constant, Duration, Empirical, LogNormal
from simcore.record import ListRecorder, NullRecorder, Recorder, Span
from simcore.rng import spawn_streams
from simcore import units

__all__ = [
    "StepsimError", "InputError", "ModelError",
    "Duration", "Constant", "LogNormal", "Empirical",
    "Span", "Recorder", "NullRecorder", "ListRecorder",
    "spawn_streams", "units",
]
