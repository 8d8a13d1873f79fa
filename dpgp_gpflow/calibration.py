"""Noise calibration: pure float64 functions of (epsilon, delta), one place for every constant.

All multipliers are for *unit* sensitivity: a Gaussian mechanism with L2 (or Mahalanobis)
sensitivity ``Delta`` adds noise with standard deviation ``multiplier * Delta``.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Union

import numpy as np

from .validation import CALIBRATIONS, Calibration, check_real, validate_calibration, validate_delta, validate_epsilon

__all__ = ["gaussian_multiplier"]

#: Multiplies every sensitivity, to absorb floating-point rounding in its computation (here, without
#: TensorFlow, so that a release file's checks recompute sensitivities: dpgp_gpflow.io.card).
SENSITIVITY_SAFETY = 1.0 + 1e-8


def analytic_gaussian_delta(epsilon: float, mu: float) -> float:
    """delta(epsilon) of a Gaussian mechanism whose sensitivity / noise std is ``mu``.

    Balle & Wang (2018), Theorem 8; equivalently the mu-GDP privacy profile (Dong, Roth & Su):
    ``Phi(-eps/mu + mu/2) - exp(eps) * Phi(-eps/mu - mu/2)``, evaluated without the cancellation of
    that difference (:func:`_log_profile`; as mu -> 0 both terms approach 1/2) and rounded up: at
    most about 1e-11 relative above the exact value, never below it.
    """
    epsilon = float(epsilon)
    mu = float(mu)
    if mu <= 0.0:
        return 0.0
    if not math.isfinite(mu):
        return 1.0
    return float(min(math.exp(_log_profile_at(epsilon, mu)), 1.0))


#: Gauss-Legendre rule for the profile of a Gaussian mechanism with mu < 1 (:func:`_log_profile`).
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(16)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
#: Beyond this ``|z|`` the profile is 1 or below float64's smallest normal delta.
_Z_MAX = 40.0
#: Relative margin added to the profile for ``mu < 1``, above its float64 error (erfcx's few ulp times
#: the cancellation in ``1 - s R(s)``, ~1e-13 on ``|s| <= 40``): the epsilon is rounded up.
_PROFILE_MARGIN = math.log1p(1e-11)


def _mills(s: Union[float, np.ndarray]) -> np.ndarray:
    """Mills ratio ``Phi(-s) / phi(s)`` (``sqrt(pi/2) erfcx(s / sqrt 2)``), stable for every ``s``."""
    from scipy import special  # here: the ledger and `dpgp budget` start without SciPy

    return math.sqrt(math.pi / 2.0) * special.erfcx(np.asarray(s, dtype=np.float64) / math.sqrt(2.0))


def _log_profile(z: float, mu: float) -> float:
    """``log delta`` of a mu-Gaussian mechanism at ``epsilon = mu (mu/2 + z)``.

    With ``R`` the Mills ratio, ``delta = Phi(-z) - phi(z) R(z + mu) = phi(z) int_z^{z+mu} (1 - s R(s)) ds``:
    for ``mu >= 1`` the first form in logs (``R(z + mu) / R(z) <= 1 - 1/41`` on ``|z| <= 40``: no
    cancellation), for ``mu < 1`` the integral by 16-point Gauss-Legendre (no cancellation as ``mu -> 0``).
    The latter plus :data:`_PROFILE_MARGIN`, so that it is an upper bound despite rounding.
    """
    if z > _Z_MAX:  # delta <= Phi(-z) < Phi(-40) ~ 4e-350: below every valid delta
        return -math.inf
    if z < -_Z_MAX:  # then mu > 80 (z >= -mu/2) and delta = Phi(-z) - phi(z) R(z + mu) = 1 in float64
        return 0.0
    if mu >= 1.0:
        from scipy import special

        ratio = float(_mills(z + mu) / _mills(z))  # R(z) overflows to inf for z << 0: ratio 0, delta = Phi(-z)
        return float(special.log_ndtr(-z)) + math.log1p(-ratio)
    s = (z + 0.5 * mu) + 0.5 * mu * _GL_NODES
    integral = 0.5 * float(np.dot(_GL_WEIGHTS, 1.0 - s * _mills(s)))
    if not integral > 0.0:
        return -math.inf
    return -0.5 * z * z - _LOG_SQRT_2PI + math.log(mu) + math.log(integral) + _PROFILE_MARGIN


def _log_profile_at(epsilon: float, mu: float) -> float:
    """``log delta(epsilon)`` of a mu-Gaussian mechanism, ``z = epsilon / mu - mu / 2`` rounded down
    by more than its rounding error (so rounded towards more delta: a conservative feasibility test)."""
    q = epsilon / mu
    z = q - 0.5 * mu
    return _log_profile(z - 4.0 * float(np.spacing(max(abs(q), 0.5 * mu, abs(z)))), mu)


def analytic_gaussian_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon at which a Gaussian mechanism with sensitivity/std ``mu`` is (eps, delta)-DP.

    Exact profile (Balle & Wang 2018) solved for ``z = epsilon / mu - mu / 2`` (``mu >= 1``) or
    ``epsilon / mu`` (``mu < 1``) by bisection to the last bit, keeping the feasible end, so the
    result is rounded up; ``inf`` for ``mu = inf`` or when epsilon overflows (``mu > ~1.9e154``).
    ``TypeError`` / ``ValueError`` for a bad ``delta`` (:func:`validate_delta`) or ``mu`` (nan, < 0).
    """
    delta = validate_delta(delta)
    if isinstance(mu, bool) or not isinstance(mu, (Real, np.floating, np.integer)):
        raise TypeError(f"mu must be a real number, got {mu!r}")
    mu = float(mu)
    if math.isnan(mu) or mu < 0.0:
        raise ValueError(f"mu must be >= 0, got {mu}")
    if mu == 0.0:
        return 0.0
    if mu == math.inf:
        return math.inf
    target = math.log(delta)
    large = mu >= 1.0
    # the unknown x: z itself (mu >= 1) or w = z + mu/2 = epsilon / mu (mu < 1); epsilon = 0 at x = lo
    lo = max(-0.5 * mu, -_Z_MAX) if large else 0.0
    hi = _Z_MAX if large else _Z_MAX + mu

    def excess(x: float) -> float:
        return _log_profile(x if large else x - 0.5 * mu, mu) - target

    if excess(lo) <= 0.0 and lo == (-0.5 * mu if large else 0.0):
        return 0.0
    if not excess(hi) <= 0.0:  # the bracket's upper end must be feasible (not an assert: kept under -O)
        raise FloatingPointError(f"cannot bracket the analytic Gaussian epsilon at mu={mu}, delta={delta}")
    for _ in range(4000):  # bisection: lo infeasible, hi feasible, until adjacent floats
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if excess(mid) > 0.0:
            lo = mid
        else:
            hi = mid
    with np.errstate(over="ignore"):
        eps = float(np.float64(mu) * (np.float64(0.5 * mu) + hi)) if large else mu * hi
    if not math.isfinite(eps):
        return math.inf
    return math.nextafter(math.nextafter(eps, math.inf), math.inf)  # round up past the product's rounding


def analytic_gaussian_multiplier(epsilon: float, delta: float, *, tol: float = 1e-12) -> float:
    """Smallest noise multiplier ``s`` (noise std per unit sensitivity) that is (epsilon, delta)-DP.

    The analytic Gaussian mechanism (Balle & Wang, ICML 2018): exact for every epsilon > 0,
    i.e. the smallest ``s`` with ``Phi(1/(2s) - eps*s) - exp(eps) Phi(-1/(2s) - eps*s) <= delta``,
    to relative ``tol``. The profile is evaluated as :func:`analytic_gaussian_epsilon` does (stable at
    every epsilon and delta), rounded towards more delta, and the bisection keeps the feasible end, so
    the multiplier is never too small. Reference values: (1, 0.01) -> 1.8779, (0.5, 0.01) -> 3.1469,
    (0.2, 0.01) -> 6.0529. ``TypeError`` / ``ValueError`` for bad ``epsilon`` or ``delta``.
    """
    epsilon = validate_epsilon(epsilon)
    delta = validate_delta(delta)
    target = math.log(delta)

    def feasible(log_s: float) -> bool:
        if log_s > 709.0:  # pragma: no cover - epsilon and delta are validated: s < 1e308
            raise FloatingPointError(f"no representable noise multiplier for (epsilon={epsilon}, delta={delta})")
        mu = math.nextafter(1.0 / math.exp(log_s), math.inf)  # at least the real 1/s
        return _log_profile_at(epsilon, mu) <= target

    lo, hi = -1.0, 1.0
    while feasible(lo):  # need a multiplier that is too small
        lo -= 1.0
    while not feasible(hi):  # and one that is large enough
        hi += 1.0
    while hi - lo > tol:  # log s to absolute tol: s to relative tol
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return math.exp(hi)  # feasible(hi) was evaluated at exactly this s


def classical_gaussian_multiplier(epsilon: float, delta: float) -> float:
    """``sqrt(2 ln(2/delta)) / epsilon`` (Hall, Rinaldo & Wasserman 2013), as used in the papers.

    Only proved for epsilon <= 1; raises ``ValueError`` above (at large epsilon it is not DP:
    eps = 50, delta = 0.01 gives 0.065 where 0.125 is needed). Prefer ``"analytic"``.
    """
    epsilon = validate_epsilon(epsilon)
    delta = validate_delta(delta)
    if epsilon > 1.0:
        raise ValueError(
            f"the classical Gaussian calibration is only valid for epsilon <= 1, got epsilon={epsilon}; "
            "use calibration='analytic' (exact for every epsilon)"
        )
    return math.sqrt(2.0 * math.log(2.0 / delta)) / epsilon


def gaussian_multiplier(epsilon: float, delta: float, calibration: str = "analytic") -> float:
    """Unit-sensitivity Gaussian noise multiplier for ``calibration`` in {"analytic", "classical"}."""
    if validate_calibration(calibration) == "analytic":
        return analytic_gaussian_multiplier(epsilon, delta)
    return classical_gaussian_multiplier(epsilon, delta)


def laplace_scale(sensitivity: float, epsilon: float) -> float:
    """Scale ``b = sensitivity / epsilon`` of the Laplace mechanism for an L1 ``sensitivity``."""
    epsilon = validate_epsilon(epsilon)
    sensitivity = check_real("sensitivity", sensitivity)
    if sensitivity < 0.0:
        raise ValueError(f"sensitivity must be >= 0, got {sensitivity}")
    return sensitivity / epsilon


def exponential_mechanism_log_weights(
    utilities: np.ndarray, epsilon: float, sensitivity: float
) -> np.ndarray:
    """Log-weights ``epsilon * u / (2 * sensitivity)`` of the exponential mechanism.

    Selecting ``argmax(w + Gumbel)`` (or sampling from ``softmax(w)``) is epsilon-DP when
    ``sensitivity`` bounds how much any utility changes between neighbouring datasets.
    """
    epsilon = validate_epsilon(epsilon)
    sensitivity = check_real("sensitivity", sensitivity)
    if sensitivity <= 0.0:
        raise ValueError(f"sensitivity must be > 0, got {sensitivity}")
    u = np.asarray(utilities, dtype=np.float64)
    if not np.all(np.isfinite(u)):
        raise ValueError("utilities must be finite")
    return epsilon * u / (2.0 * sensitivity)
