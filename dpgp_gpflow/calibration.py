"""Noise calibration: pure float64 functions of (epsilon, delta), one place for every constant.

All multipliers are for *unit* sensitivity: a Gaussian mechanism with L2 (or Mahalanobis)
sensitivity ``Delta`` adds noise with standard deviation ``multiplier * Delta``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from .validation import CALIBRATIONS, Calibration, check_real, validate_calibration, validate_delta, validate_epsilon

__all__ = [
    "CALIBRATIONS",
    "Calibration",
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "analytic_gaussian_multiplier",
    "classical_gaussian_multiplier",
    "exponential_mechanism_log_weights",
    "gaussian_multiplier",
    "laplace_scale",
    "validate_delta",
    "validate_epsilon",
]

def analytic_gaussian_delta(epsilon: float, mu: float) -> float:
    """Exact delta(epsilon) of a Gaussian mechanism whose sensitivity / noise std is ``mu``.

    Balle & Wang (2018), Theorem 8; equivalently the mu-GDP privacy profile (Dong, Roth & Su):
    ``Phi(-eps/mu + mu/2) - exp(eps) * Phi(-eps/mu - mu/2)``.
    """
    epsilon = float(epsilon)
    mu = float(mu)
    if mu <= 0.0:
        return 0.0
    if not math.isfinite(mu):
        return 1.0
    a = -epsilon / mu + mu / 2.0
    b = -epsilon / mu - mu / 2.0
    # exp(eps) * Phi(b) computed in log space so that large epsilon does not overflow.
    value = special.ndtr(a) - math.exp(epsilon + special.log_ndtr(b))
    return float(max(value, 0.0))


def analytic_gaussian_multiplier(epsilon: float, delta: float, *, tol: float = 1e-12) -> float:
    """Smallest noise multiplier ``s`` (noise std per unit sensitivity) that is (epsilon, delta)-DP.

    The analytic Gaussian mechanism (Balle & Wang, ICML 2018): exact for every epsilon > 0,
    i.e. the smallest ``s`` with ``Phi(1/(2s) - eps*s) - exp(eps) Phi(-1/(2s) - eps*s) <= delta``.
    The returned value is rounded *up* (bisection keeps the feasible end), so it is never too small.
    Reference values: (1, 0.01) -> 1.8779, (0.5, 0.01) -> 3.1469, (0.2, 0.01) -> 6.0529.
    """
    epsilon = validate_epsilon(epsilon)
    delta = validate_delta(delta)

    def excess(log_s: float) -> float:
        return analytic_gaussian_delta(epsilon, math.exp(-log_s)) - delta

    lo, hi = -1.0, 1.0
    while excess(lo) <= 0.0:  # need a multiplier that is too small
        lo -= 1.0
    while excess(hi) > 0.0:  # and one that is large enough
        hi += 1.0
    log_s = optimize.brentq(excess, lo, hi, xtol=tol, rtol=4 * np.finfo(float).eps, maxiter=500)
    s = math.exp(log_s)
    # Step up until feasible: brentq's root may sit on either side of the exact one.
    while analytic_gaussian_delta(epsilon, 1.0 / s) > delta:
        s *= 1.0 + 1e-12
    return s


def analytic_gaussian_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon at which a Gaussian mechanism with sensitivity/std ``mu`` is (eps, delta)-DP."""
    delta = validate_delta(delta)
    mu = float(mu)
    if mu <= 0.0:
        return 0.0
    if analytic_gaussian_delta(0.0, mu) <= delta:
        return 0.0
    hi = 1.0
    while analytic_gaussian_delta(hi, mu) > delta:
        hi *= 2.0
    eps = optimize.brentq(lambda e: analytic_gaussian_delta(e, mu) - delta, 0.0, hi, xtol=1e-13)
    while analytic_gaussian_delta(eps, mu) > delta:
        eps *= 1.0 + 1e-12
    return float(eps)


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
