"""Duration distributions: small immutable objects with ``sample(rng)`` and an analytic ``mean``
(µs), checked when built, so tests can hold sample statistics against the analytic values."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


class Duration:
    """A non-negative duration in µs. Subclasses implement :meth:`sample` and :attr:`mean_us`."""

    mean_us: float

    def sample(self, rng: np.random.Generator) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    def scaled(self, factor: float) -> "Duration":  # pragma: no cover - interface
        """The same distribution with every value multiplied by ``factor`` (≥ 0)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Constant(Duration):
    """Always ``value_us`` µs.

    Raises:
        ValueError: if ``value_us`` < 0 or not finite.
    """

    value_us: float

    def __post_init__(self):
        if not (math.isfinite(self.value_us) and self.value_us >= 0):
            raise ValueError(f"value_us must be finite and >= 0, got {self.value_us!r}")

    @property
    def mean_us(self) -> float:
        return self.value_us

    def sample(self, rng: np.random.Generator) -> float:
        return self.value_us

    def scaled(self, factor: float) -> "Constant":
        return Constant(self.value_us * factor)


@dataclass(frozen=True)
class LogNormal(Duration):
    """Log-normal with the given mean (µs) and coefficient of variation (std / mean).

    ``cv == 0`` degenerates to a constant. Raises ValueError for a negative mean or cv.
    """

    mean: float
    cv: float

    def __post_init__(self):
        if not (math.isfinite(self.mean) and self.mean >= 0):
            raise ValueError(f"mean must be finite and >= 0, got {self.mean!r}")
        if not (math.isfinite(self.cv) and self.cv >= 0):
            raise ValueError(f"cv must be finite and >= 0, got {self.cv!r}")

    @property
    def mean_us(self) -> float:
        return self.mean

    def sample(self, rng: np.random.Generator) -> float:
        if self.cv == 0 or self.mean == 0:
            return self.mean
        sigma2 = math.log1p(self.cv * self.cv)
        mu = math.log(self.mean) - sigma2 / 2
        return float(rng.lognormal(mu, math.sqrt(sigma2)))

    def scaled(self, factor: float) -> "LogNormal":
        return LogNormal(self.mean * factor, self.cv)


@dataclass(frozen=True)
class Empirical(Duration):
    """Resamples measured values (µs) uniformly with replacement.

    Raises:
        ValueError: if ``samples_us`` is empty or holds a negative or non-finite value.
    """

    samples_us: tuple[float, ...]
    _arr: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        arr = np.asarray(self.samples_us, dtype=float)
        if arr.size == 0:
            raise ValueError("samples_us is empty")
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError("samples_us must be finite and >= 0")
        object.__setattr__(self, "_arr", arr)

    @property
    def mean_us(self) -> float:
        return float(self._arr.mean())

    def sample(self, rng: np.random.Generator) -> float:
        return float(self._arr[rng.integers(self._arr.size)])

    def scaled(self, factor: float) -> "Empirical":
        return Empirical(tuple(float(v) * factor for v in self._arr))
