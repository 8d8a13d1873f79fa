"""Every random draw a mechanism makes, in one place: Gaussian, Laplace and Gumbel noise.

``seed=None`` (the default, and the only private choice) draws from the operating system's CSPRNG
(:class:`secrets.SystemRandom`), a fresh generator for every call. An explicit ``seed`` uses
numpy's PCG64 so that experiments are reproducible; the result is then NOT private against anyone
who knows or can guess the seed, so it warns (:class:`~dpgp_gpflow.ReproducibleNoiseWarning`) and
the mechanism marks its output ``reproducible=True``.

These are floating-point samplers (see ``docs/privacy_model.md#randomness``): attacks on the
low-order bits of floating-point noise exist in principle (Mironov 2012; Jin et al. 2022). The
Gaussian draw averages two normal draws, ``(z1 + z2) / sqrt(2)`` (Holohan & Braghin 2021), a
mitigation rather than an exact sampler.
"""

from __future__ import annotations

import math
import secrets
import warnings
from typing import Optional, Tuple, Union

import numpy as np

from .exceptions import ReproducibleNoiseWarning

__all__ = ["gumbel", "laplace", "standard_normal"]

Generator = Union[secrets.SystemRandom, np.random.Generator]


def _generator(seed: Optional[int], what: str) -> Tuple[Generator, bool]:
    """The CSPRNG (``seed=None``) or a seeded PCG64 with the one reproducibility warning."""
    if seed is None:
        return secrets.SystemRandom(), False
    warnings.warn(
        f"{what} drawn from an explicit seed ({seed!r}): the result is reproducible and NOT private "
        "against anyone who knows the seed; use seed=None for a private release",
        ReproducibleNoiseWarning,
        stacklevel=4,
    )
    return np.random.default_rng(seed), True


def _size(size: int) -> int:
    size = int(size)
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    return size


def standard_normal(size: int, seed: Optional[int] = None) -> Tuple[np.ndarray, bool]:
    """``size`` standard normal draws and whether they are reproducible (``seed`` given)."""
    size = _size(size)
    rng, reproducible = _generator(seed, "DP noise")
    if reproducible:
        return rng.standard_normal(size), True
    z = np.fromiter((rng.gauss(0.0, 1.0) + rng.gauss(0.0, 1.0) for _ in range(size)), dtype=np.float64, count=size)
    return z / math.sqrt(2.0), False


def laplace(size: int, seed: Optional[int] = None) -> Tuple[np.ndarray, bool]:
    """``size`` standard Laplace draws (scale 1) and whether they are reproducible.

    From the CSPRNG each draw is ``E1 - E2`` with standard exponentials ``E = -log(1 - U)``.
    """
    size = _size(size)
    rng, reproducible = _generator(seed, "DP noise")
    if reproducible:
        return rng.laplace(0.0, 1.0, size), True
    z = np.fromiter((math.log1p(-rng.random()) - math.log1p(-rng.random()) for _ in range(size)),
                    dtype=np.float64, count=size)
    return z, False


def gumbel(size: int, seed: Optional[int] = None) -> Tuple[np.ndarray, bool]:
    """``size`` standard Gumbel draws (for the exponential mechanism's Gumbel-max) and whether they
    are reproducible. From the CSPRNG each is ``-log E`` with ``E ~ Exp(1)``, redrawn if ``E = 0``."""
    size = _size(size)
    rng, reproducible = _generator(seed, "the exponential mechanism's noise")
    if reproducible:
        return rng.gumbel(size=size), True
    out = np.empty(size)
    for i in range(size):
        e = 0.0
        while not e > 0.0:  # Exp(1) = 0 has probability 2^-53; redraw rather than return +inf
            e = rng.expovariate(1.0)
        out[i] = -math.log(e)
    return out, False
