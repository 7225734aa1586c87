"""Seeded random streams: one seed per run, one child stream per component, spawned in a fixed
order from a :class:`numpy.random.SeedSequence`. The global random state is never used."""
from __future__ import annotations

import numpy as np
import numpy.random  # noqa: F401  (numpy loads it on first use: here, before a pool forks,
# not in every worker: 18 ms each)


def spawn_streams(seed: int, names: list[str]) -> dict[str, np.random.Generator]:
    """Return one independent generator per name.

    The child for ``names[i]`` is the i-th spawn of ``SeedSequence(seed)``, so the same seed
    and the same list give the same streams byte for byte.

    Args:
        seed: non-negative integer.
        names: component names, in the fixed order the caller documents.

    Raises:
        ValueError: if ``seed`` is negative or names repeat.
    """
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if len(set(names)) != len(names):
        raise ValueError(f"stream names repeat: {names}")
    children = np.random.SeedSequence(seed).spawn(len(names))
    return {n: np.random.default_rng(c) for n, c in zip(names, children)}
