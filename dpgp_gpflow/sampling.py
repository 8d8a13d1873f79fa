"""Every random draw a mechanism makes, in one place: Gaussian, Laplace and exponential-mechanism noise.

**Exact by default** (``docs/exact_sampling.md``). With ``seed=None`` the noise comes from OpenDP's
exact samplers, which draw from the operating system's entropy with exact integer arithmetic:

* :func:`standard_normal`: the discrete Gaussian on the grid ``2^GRID_EXPONENT Z`` with scale 1;
* :func:`laplace`: the discrete Laplace on the same grid with scale 1;
* :func:`gumbel_argmax`: an exact exponential-mechanism draw (report-noisy-max with Gumbel noise);
* :func:`permute_and_flip_index`: an exact permute-and-flip draw (uniform order and Bernoulli(exp(-gamma))
  coins of Canonne, Kamath & Steinke in rational arithmetic, from the CSPRNG).

A grid sample is only safe when the value it perturbs is rounded to the same grid and the two are
added exactly (:func:`grid_sum`; adding grid noise to an unrounded float in floating point would
reveal the value's low-order bits). The mechanisms do that on a whitened query whose sensitivity is
inflated for the rounding (:func:`gaussian_grid_factor`, :func:`add_laplace`) and undo the whitening
afterwards, which is post-processing.

The floating-point samplers of earlier versions remain as explicit options for speed comparisons
(:func:`float_standard_normal`, :func:`float_laplace`, :func:`gumbel`; the mechanisms warn with
:class:`~dpgp_gpflow.PrivacyLeakWarning` when asked for them): each Gaussian is
``(z1 + z2) / sqrt(2)`` of two CSPRNG normals (Holohan & Braghin 2021), a mitigation rather than an
exact sampler; attacks on the low-order bits of floating-point noise exist (Mironov 2012; Jin et al. 2022).

An explicit ``seed`` uses numpy's PCG64 (normal, Laplace or Gumbel floats, or a permutation and uniform
coins for permute-and-flip, whatever the sampler) so
that experiments are reproducible; the result is then NOT private against anyone who knows or can
guess the seed, so it warns (:class:`~dpgp_gpflow.ReproducibleNoiseWarning`) and the mechanism marks
its output ``reproducible=True``.
"""

from __future__ import annotations

import functools
import math
import secrets
import warnings
from fractions import Fraction
from typing import Any, Optional, Tuple

import numpy as np
from scipy import special

from .exceptions import PrivacyLeakWarning, ReproducibleNoiseWarning

__all__: list[str] = []  # internal: the package imports these names by name

#: The exact samplers' grid is ``2^GRID_EXPONENT`` times the noise scale (unit scale: 9.1e-13).
GRID_EXPONENT = -40
#: The std of the smoothing step in the bound of :func:`discrete_gaussian_delta_bound` (noise units):
#: 2^10 grid steps, far above the grid's smoothing parameter.
SMOOTHING_STD = 2.0**-30
#: Multiplies a Gaussian sensitivity for the exact sampler: at least ``1 / sqrt(1 - SMOOTHING_STD^2)``
#: (which is 1 + 2^-61, below float64 resolution), the continuous Gaussian the bound compares with.
DISCRETE_GAUSSIAN_FACTOR = 1.0 + 2.0**-50
#: Grid noise beyond this many scales would not be exact in float64 (probability below e^-4096).
MAX_GRID_NOISE = 2.0**12
#: The noise samplers a release may ask for.
SAMPLERS = ("exact", "float")

_GRID = 2.0**GRID_EXPONENT
#: float64's unit roundoff u = 2^-53 (round to nearest), the one value every rounding bound of the package uses.
UNIT_ROUNDOFF = 2.0**-53


def validate_sampler(sampler: Any) -> str:
    """``"exact"`` or ``"float"``; anything else raises ``ValueError``."""
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    return sampler


def warn_float_sampler(what: str) -> None:
    """The one warning for a release that asked for the floating-point sampler."""
    warnings.warn(
        f"{what} drawn with sampler='float': floating-point noise is not an exact sample and its "
        "low-order bits may leak (docs/exact_sampling.md); use the default sampler='exact' for a release "
        "you publish",
        PrivacyLeakWarning,
        stacklevel=3,
    )


def _seeded(seed: int, what: str) -> np.random.Generator:
    """A seeded PCG64, with the one reproducibility warning (``seed=None`` uses the CSPRNG,
    ``secrets.SystemRandom()``, instead)."""
    warnings.warn(
        f"{what} drawn from an explicit seed ({seed!r}): the result is reproducible and NOT private "
        "against anyone who knows the seed; use seed=None for a private release",
        ReproducibleNoiseWarning,
        stacklevel=4,
    )
    return np.random.default_rng(seed)


def _size(size: int) -> int:
    size = int(size)
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    return size


@functools.lru_cache(maxsize=1)
def _opendp():
    """OpenDP's prelude with its ``contrib`` features on (imported on first use: it is slow to load)."""
    import opendp.prelude as odp

    odp.enable_features("contrib")
    return odp


def _on_grid(z: Any, size: int) -> np.ndarray:
    """OpenDP's output as float64, checked to be ``size`` exact grid values."""
    z = np.asarray(z, dtype=np.float64).reshape(-1)
    scaled = z * 2.0**-GRID_EXPONENT
    if z.size != size or not np.all(np.abs(z) < MAX_GRID_NOISE) or not np.all(scaled == np.rint(scaled)):
        # depends on the noise alone (never on data): refusing leaks nothing
        raise FloatingPointError("the exact sampler returned values that are not exact grid points")
    return z


def _exact_grid_noise(kind: str, size: int) -> np.ndarray:
    """``size`` exact draws of OpenDP's discrete ``kind`` ("gaussian": ``make_gaussian`` under the L2
    distance; "laplace": ``make_laplace`` under L1) with scale 1 on ``2^GRID_EXPONENT Z``, applied to a
    zero vector, as exact float64 grid values."""
    if size == 0:
        return np.zeros(0)
    odp = _opendp()
    make, distance = {"gaussian": (odp.m.make_gaussian, odp.l2_distance),
                      "laplace": (odp.m.make_laplace, odp.l1_distance)}[kind]
    measurement = make(odp.vector_domain(odp.atom_domain(T=float, nan=False), size=size), distance(T=float),
                       scale=1.0, k=GRID_EXPONENT)
    return _on_grid(measurement([0.0] * size), size)


def standard_normal(size: int, seed: Optional[int] = None) -> Tuple[np.ndarray, bool]:
    """``size`` standard Gaussian draws and whether they are reproducible (``seed`` given).

    ``seed=None``: exact samples of the discrete Gaussian on ``2^GRID_EXPONENT Z`` with scale 1
    (OpenDP's ``make_gaussian`` on a zero vector: Canonne, Kamath & Steinke's sampler in integer
    arithmetic, OS entropy), returned as exact float64 grid values. An explicit ``seed`` falls back
    to numpy's (floating-point) normal draws and warns.
    """
    size = _size(size)
    if seed is not None:
        return _seeded(seed, "DP noise").standard_normal(size), True
    return _exact_grid_noise("gaussian", size), False


def laplace(size: int, seed: Optional[int] = None) -> Tuple[np.ndarray, bool]:
    """``size`` standard Laplace draws (scale 1) and whether they are reproducible.

    ``seed=None``: exact samples of the discrete Laplace on ``2^GRID_EXPONENT Z`` with scale 1
    (mass proportional to ``exp(-|x|)``; OpenDP's ``make_laplace`` on a zero vector), as exact
    float64 grid values. An explicit ``seed`` falls back to numpy's Laplace draws and warns.
    """
    size = _size(size)
    if seed is not None:
        return _seeded(seed, "DP noise").laplace(0.0, 1.0, size), True
    return _exact_grid_noise("laplace", size), False


def float_standard_normal(size: int, seed: Optional[int] = None) -> Tuple[np.ndarray, bool]:
    """The floating-point sampler: ``(z1 + z2) / sqrt(2)`` of two CSPRNG normals per draw (not exact)."""
    size = _size(size)
    if seed is not None:
        return _seeded(seed, "DP noise").standard_normal(size), True
    rng = secrets.SystemRandom()
    z = np.fromiter((rng.gauss(0.0, 1.0) + rng.gauss(0.0, 1.0) for _ in range(size)), dtype=np.float64, count=size)
    return z / math.sqrt(2.0), False


def float_laplace(size: int, seed: Optional[int] = None) -> Tuple[np.ndarray, bool]:
    """The floating-point sampler: ``E1 - E2`` with standard exponentials ``E = -log(1 - U)`` (not exact)."""
    size = _size(size)
    if seed is not None:
        return _seeded(seed, "DP noise").laplace(0.0, 1.0, size), True
    rng = secrets.SystemRandom()
    z = np.fromiter((math.log1p(-rng.random()) - math.log1p(-rng.random()) for _ in range(size)),
                    dtype=np.float64, count=size)
    return z, False


def gumbel(size: int, seed: Optional[int] = None) -> Tuple[np.ndarray, bool]:
    """``size`` standard Gumbel draws (floating point) and whether they are reproducible: the noise of
    a seeded or ``sampler="float"`` Gumbel-max. From the CSPRNG each is ``-log E`` with
    ``E ~ Exp(1)``, redrawn if ``E = 0``. The exact exponential mechanism is :func:`gumbel_argmax`."""
    size = _size(size)
    if seed is not None:
        return _seeded(seed, "the exponential mechanism's noise").gumbel(size=size), True
    rng = secrets.SystemRandom()
    out = np.empty(size)
    for i in range(size):
        e = 0.0
        while not e > 0.0:  # Exp(1) = 0 has probability 2^-53; redraw rather than return +inf
            e = rng.expovariate(1.0)
        out[i] = -math.log(e)
    return out, False


def gumbel_argmax(log_weights: Any, seed: Optional[int] = None) -> Tuple[int, bool]:
    """One exact draw of index ``i`` with probability ``softmax(log_weights)_i``, and whether it is
    reproducible.

    ``seed=None``: OpenDP's report-noisy-max with Gumbel noise of scale 1 (``make_noisy_max`` with a
    zero-concentrated output measure; only its sampler is used, the accounting is the caller's),
    which compares the noisy scores exactly (partially sampled Gumbels refined until the argmax is
    certain), so the index has exactly the exponential mechanism's distribution for the given float
    log-weights. An explicit ``seed``: ``argmax(log_weights + gumbel(size, seed))`` in floating point.
    """
    w = np.asarray(log_weights, dtype=np.float64).reshape(-1)
    if w.size == 0:
        raise ValueError("log_weights must not be empty")
    if not np.all(np.isfinite(w)):
        raise ValueError("log_weights must be finite")
    if seed is not None:
        noise, reproducible = gumbel(w.size, seed)
        return int(np.argmax(w + noise)), reproducible
    if w.size == 1:
        return 0, False
    odp = _opendp()
    space = odp.vector_domain(odp.atom_domain(T=float, nan=False), size=w.size), odp.linf_distance(T=float)
    measurement = odp.m.make_noisy_max(*space, odp.zero_concentrated_divergence(), scale=1.0)
    return int(measurement([float(v) for v in w])), False


def _bernoulli(p: Fraction, rng: secrets.SystemRandom) -> bool:
    """Exact Bernoulli(p) for a rational ``0 <= p <= 1``: a uniform integer below the denominator."""
    return rng.randrange(p.denominator) < p.numerator


def _bernoulli_exp(gamma: Fraction, rng: secrets.SystemRandom) -> bool:
    """Exact Bernoulli(exp(-gamma)) for a rational ``gamma >= 0`` (Canonne, Kamath & Steinke 2020,
    Algorithm 1): for ``gamma <= 1`` count ``K`` while Bernoulli(gamma / K) succeeds and return
    whether ``K`` ends odd; a larger ``gamma`` is ``floor(gamma)`` Bernoulli(exp(-1)) coins and one for
    the fraction. Only rational arithmetic and uniform integers."""
    whole = math.floor(gamma)
    return all(_bernoulli_exp_unit(Fraction(1), rng) for _ in range(whole)) and _bernoulli_exp_unit(gamma - whole, rng)


def _bernoulli_exp_unit(gamma: Fraction, rng: secrets.SystemRandom) -> bool:
    """Exact Bernoulli(exp(-gamma)) for a rational ``0 <= gamma <= 1`` (CKS 2020, Algorithm 1)."""
    k = 1
    while _bernoulli(gamma / k, rng):
        k += 1
    return k % 2 == 1


def permute_and_flip_index(log_weights: Any, seed: Optional[int] = None) -> Tuple[int, bool]:
    """One permute-and-flip draw (McKenna & Sheldon 2020) over ``log_weights`` and whether it is
    reproducible: visit the candidates in a uniformly random order and return the first ``r`` whose
    coin, heads with probability ``exp(w_r - max(w))``, lands heads (the best one always does).

    With ``w = epsilon u / (2 Delta_u)`` this is the epsilon-DP permute-and-flip mechanism.
    ``seed=None``: exact for the given float64 ``w``: the order is drawn with uniform integers from
    the operating system's CSPRNG (``secrets.SystemRandom``) and each coin by
    Bernoulli(exp(-gamma)) of Canonne, Kamath & Steinke 2020 with ``gamma = max(w) - w_r`` (its
    float64 value, taken as an exact rational). An explicit ``seed``: numpy's permutation and
    floating-point coins ``U < exp(-gamma)``, with the reproducibility warning.
    """
    w = np.asarray(log_weights, dtype=np.float64).reshape(-1)
    if w.size == 0:
        raise ValueError("log_weights must not be empty")
    if not np.all(np.isfinite(w)):
        raise ValueError("log_weights must be finite")
    gamma = np.max(w) - w  # >= 0, exactly 0 at the best candidate
    if seed is not None:
        seeded = _seeded(seed, "the permute-and-flip mechanism's randomness")
        for r in seeded.permutation(w.size):  # the best candidate's coin (exp(0) = 1 > U) always stops it
            if seeded.random() < math.exp(-gamma[r]):
                break
        return int(r), True
    rng = secrets.SystemRandom()
    remaining = list(range(w.size))
    while True:  # ends: the best candidate's coin (gamma = 0) always lands heads
        r = remaining.pop(rng.randrange(len(remaining)))
        if _bernoulli_exp(Fraction(float(gamma[r])), rng):
            return r, False


def grid_sum(values: Any, noise: Any, exponent: int = GRID_EXPONENT) -> np.ndarray:
    """``round(values) + noise`` with ``values`` rounded to the grid ``2^exponent Z`` (to nearest, ties
    to even) and the sum formed exactly; returned as the nearest float64 (a function of the exact sum
    alone, so the conversion is post-processing).

    This is the step that makes grid noise safe: the output depends on the private ``values`` only
    through their grid point. Noise off the grid (a seeded or substituted sampler) is added exactly too.
    """
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    noise = np.asarray(noise, dtype=np.float64).reshape(-1)
    if values.shape != noise.shape:
        raise ValueError(f"values {values.shape} and noise {noise.shape} must have the same shape")
    if not (np.all(np.isfinite(values)) and np.all(np.isfinite(noise))):
        raise ValueError("values and noise must be finite")
    up = 2.0**-exponent
    with np.errstate(over="raise"):
        m = np.rint(values * up)  # exact: a power-of-two scaling, then an integer-valued float
        n = noise * up
    limit = 2.0**62
    if np.all(np.abs(m) < limit) and np.all(np.abs(n) < limit) and np.all(n == np.rint(n)):
        total = m.astype(np.int64) + n.astype(np.int64)  # exact integer sum, |total| < 2^63
        return total.astype(np.float64) * 2.0**exponent
    step = Fraction(2) ** exponent
    return np.array([float(int(a) * step + Fraction(float(b))) for a, b in zip(m, noise)], dtype=np.float64)


def add_whitened_noise(z: Any, seed: Optional[int] = None) -> Tuple[np.ndarray, bool]:
    """``z + xi`` with ``xi`` one :func:`standard_normal` draw of ``z``'s size, and whether it is reproducible:
    the one step of every exact Gaussian release that touches its private query (the cloaking mechanism,
    the standard mechanism, the whole-row statistics).

    ``z`` is the whitened query: noise std 1, its L2 shift between neighbours at most ``1 / s`` of the
    release's multiplier ``s`` after inflating its sensitivity by :func:`gaussian_grid_factor`. Exact
    (``seed=None``): ``z`` rounded to the grid and the grid noise added exactly (:func:`grid_sum`), so the
    result depends on ``z`` only through its grid point. Seeded: ``z + xi`` in floating point. ``ValueError``
    (nothing drawn, so nothing charged) for a ``z`` that is not finite, seeded or not: no release publishes NaN.
    """
    z = np.asarray(z, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(z)):
        raise ValueError("the whitened query is not finite (a public scale overflowed float64): nothing drawn")
    xi, reproducible = standard_normal(z.size, seed)
    return (z + xi if reproducible else grid_sum(z, xi)), reproducible


def gaussian_grid_factor(multiplier: float, dimension: int) -> float:
    """Factor (>= 1) by which a Gaussian release calibrated at noise ``multiplier`` must inflate its
    sensitivity so that the exact sampler keeps its (epsilon, delta).

    The release whitens its query to sensitivity ``1 / (s * factor)`` (noise std 1), rounds it to the
    grid (which moves a neighbour's shift by at most ``sqrt(dimension) 2^GRID_EXPONENT`` in L2) and adds
    the discrete Gaussian; by :func:`discrete_gaussian_delta_bound` that is at least as private as a
    continuous Gaussian with std ``sqrt(1 - SMOOTHING_STD^2)``. So it needs
    ``(1/(s factor) + sqrt(r) gamma) * DISCRETE_GAUSSIAN_FACTOR <= 1/s``, i.e.
    ``factor = K / (1 - s K sqrt(r) gamma)`` with ``K = DISCRETE_GAUSSIAN_FACTOR``.
    """
    s = float(multiplier)
    r = int(dimension)
    if not (s > 0.0 and math.isfinite(s)) or r < 1:
        raise ValueError(f"need a positive multiplier and dimension, got {multiplier!r}, {dimension!r}")
    loss = grid_loss(s, math.sqrt(r))
    if not loss <= MAX_GRID_LOSS:
        raise ValueError(f"the noise multiplier {s:.3g} is too large for the exact sampler's grid "
                         f"(2^{GRID_EXPONENT}) in {r} dimensions")
    return grid_factor_of_loss(loss)


#: Largest :func:`grid_loss` the exact sampler accepts.
MAX_GRID_LOSS = 0.5


def grid_loss(multiplier: Any, sqrt_dimension: Any) -> Any:
    """``s K sqrt(r) 2^GRID_EXPONENT``, the part of the privacy budget the grid rounding uses (floats
    or tensors: the compiled engine evaluates the same formula in its graph)."""
    return multiplier * DISCRETE_GAUSSIAN_FACTOR * sqrt_dimension * _GRID


def grid_factor_of_loss(loss: Any) -> Any:
    """:func:`gaussian_grid_factor` from its :func:`grid_loss` (floats or tensors), rounded up."""
    return DISCRETE_GAUSSIAN_FACTOR / (1.0 - loss) * (1.0 + 4.0 * UNIT_ROUNDOFF)


def _log_theta_tail(a: float) -> float:
    """``log(2 sum_{j>=1} exp(-a j^2))`` for ``a > 0`` (the Poisson-summation remainder)."""
    terms = [-a * j * j for j in range(1, 60)]
    top = terms[0]
    return math.log(2.0) + top + math.log(sum(math.exp(t - top) for t in terms))


def discrete_gaussian_delta_bound(epsilon: float, mu: float, dimension: int, *, grid: float = _GRID,
                                  smoothing: float = SMOOTHING_STD) -> float:
    """Upper bound on ``delta(epsilon)`` of ``c + DG(grid Z^r, 1)`` against ``c' + DG(grid Z^r, 1)``
    for grid points ``c, c'`` with ``||c - c'|| <= mu`` (``r = dimension``): the bound relied on.

    Lemma (docs/exact_sampling.md): let ``X ~ N(c, (1 - t^2) I)`` (``t = smoothing``) and, given ``X``,
    ``Y`` the discrete Gaussian on the grid centred at ``X`` with std ``t``. By Poisson summation the
    mass function of ``Y`` and that of ``c + DG(grid Z^r, 1)`` are within a factor ``e^(r eta)``
    of each other at every point, with ``eta = log((1 + e1) / (1 - e2))`` (the larger of the two
    orders), ``e1 = 2 sum_j exp(-2 pi^2 t^2 j^2 / grid^2)``, ``e2 = 2 sum_j exp(-2 pi^2 j^2 / grid^2)``.
    ``Y`` is post-processing of the Gaussian mechanism with std ``sqrt(1 - t^2)``, so the exact
    mechanism is ``(epsilon + 2 r eta, e^(r eta) delta_G(epsilon; mu / sqrt(1 - t^2)))``-DP, where
    ``delta_G`` is the analytic-Gaussian profile; this returns that ``delta`` at level ``epsilon``
    (``delta_G`` evaluated at ``epsilon - 2 r eta``). At the package's grid and ``t`` (2^10 grid
    steps), ``eta < 2^-1000`` and the bound is the analytic Gaussian's at ``mu * (1 + 2^-61)``.
    """
    epsilon, mu, r = float(epsilon), float(mu), int(dimension)
    grid, t = float(grid), float(smoothing)
    if not (0.0 < t < 1.0 and grid > 0.0 and r >= 1 and mu >= 0.0 and epsilon >= 0.0):
        raise ValueError("need 0 < smoothing < 1, grid > 0, dimension >= 1, mu >= 0 and epsilon >= 0")
    log_e1 = _log_theta_tail(2.0 * math.pi**2 * (t / grid) ** 2)
    log_e2 = _log_theta_tail(2.0 * math.pi**2 / grid**2)
    e1, e2 = math.exp(log_e1), math.exp(log_e2)  # underflow to 0 only below 1e-308
    if not (e1 < 1.0 and e2 < 1.0):
        return 1.0
    eta = max(math.log1p(e1) - math.log1p(-e2), math.log1p(e2) - math.log1p(-e1))
    level = epsilon - 2.0 * r * eta
    if level < 0.0:
        return 1.0
    m = mu / math.sqrt(1.0 - t * t)
    if m == 0.0:
        return 0.0
    a, b = -level / m + m / 2.0, -level / m - m / 2.0
    profile = max(float(special.ndtr(a)) - math.exp(level + float(special.log_ndtr(b))), 0.0)
    return min(1.0, math.exp(r * eta) * profile)


def add_laplace(values: Any, scales: Any, epsilon: float, seed: Optional[int] = None) -> Tuple[np.ndarray, bool]:
    """``values + Laplace(scales)`` as an exact epsilon-DP release of values that each move by at most
    ``scales * epsilon`` between neighbours; returns the released values and whether they are reproducible.

    The noise is one call of :func:`laplace` (unit scale). ``seed=None`` (exact): each value is whitened
    exactly, ``a = value / b'`` with ``b' = scale / (1 - 2^GRID_EXPONENT / epsilon)`` (rounded up), rounded
    to the grid, the discrete Laplace grid noise is added exactly, and ``b' (a + noise)`` is published
    (post-processing). A neighbour moves ``a`` by at most ``epsilon (1 - 2^GRID_EXPONENT / epsilon)`` and
    the rounding by at most ``2^GRID_EXPONENT`` more, so each value is exactly epsilon-DP (the discrete
    Laplace with scale 1 has privacy loss exactly the shift). The actual scale ``b'`` exceeds the nominal
    one by a relative ``2^GRID_EXPONENT / epsilon`` (9e-13 at epsilon = 1). Seeded (or a substituted
    sampler returning floats marked reproducible): ``values + scales * noise`` in floating point.
    """
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    scales = np.broadcast_to(np.asarray(scales, dtype=np.float64), values.shape)
    epsilon = float(epsilon)
    if not (np.all(scales > 0.0) and np.all(np.isfinite(scales)) and np.all(np.isfinite(values))):
        raise ValueError("values must be finite and scales positive and finite")
    if not (epsilon > 0.0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be positive and finite, got {epsilon}")
    shrink = 1.0 - _GRID / epsilon - 8.0 * UNIT_ROUNDOFF
    if not shrink >= 0.5:
        raise ValueError(f"epsilon={epsilon} is too small for the exact sampler's grid (2^{GRID_EXPONENT})")
    z, reproducible = laplace(values.size, seed)  # the module's one Laplace draw (tests substitute it)
    z = np.asarray(z, dtype=np.float64).reshape(-1)
    if reproducible:
        return values + scales * z, True
    out = np.empty(values.size)
    up = 2**-GRID_EXPONENT
    for i, (v, b, noise) in enumerate(zip(values, scales, z)):
        scale = Fraction(float(b)) / Fraction(shrink)  # exact b' (>= the nominal scale / shrink)
        a = round(Fraction(float(v)) / scale * up)  # the whitened value on the grid, exactly
        out[i] = float((a + Fraction(float(noise)) * up) / up * scale)
    return out, False
