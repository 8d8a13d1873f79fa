"""The selection mechanisms over utilities, drawn by :mod:`dpgp_gpflow.sampling`: the exponential
mechanism (McSherry & Talwar 2007) and permute-and-flip (McKenna & Sheldon 2020).

Both use the log-weights ``w = epsilon u / (2 Delta_u)``
(:func:`~dpgp_gpflow.calibration.exponential_mechanism_log_weights`) and are epsilon-DP when
``Delta_u`` bounds the change of every utility between neighbouring datasets. Permute-and-flip
visits the candidates in a random order and stops at the first whose coin, heads with
probability ``exp(w_r - max w)``, lands heads; its expected utility is never below the exponential
mechanism's (McKenna & Sheldon, Theorem 2).

The draws are exact by default (:func:`dpgp_gpflow.sampling.gumbel_argmax`,
:func:`dpgp_gpflow.sampling.permute_and_flip`; docs/exact_sampling.md). ``sampler="float"`` is the
earlier floating-point Gumbel-max of the exponential mechanism, which is not exact (Ilvento 2020),
for speed comparisons only (warns).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from .. import sampling
from ..calibration import exponential_mechanism_log_weights

__all__ = [
    "MECHANISMS",
    "MECHANISM_NAMES",
    "draw",
    "exponential_mechanism",
    "gumbel_max",
    "permute_and_flip",
    "permute_and_flip_probabilities",
    "selection_probabilities",
    "validate_mechanism",
]

#: The selection mechanisms :func:`~dpgp_gpflow.selection.select_hyperparameters` offers.
MECHANISMS = ("exponential", "permute_and_flip")
#: How each mechanism is named in the accountant's ledger.
MECHANISM_NAMES = {"exponential": "exponential mechanism", "permute_and_flip": "permute-and-flip"}


def validate_mechanism(mechanism: Any) -> str:
    """``"exponential"`` or ``"permute_and_flip"``; anything else raises ``ValueError``."""
    if not isinstance(mechanism, str) or mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
    return mechanism


def permute_and_flip_probabilities(utilities: Any, epsilon: float, sensitivity: float) -> np.ndarray:
    """Permute-and-flip's selection probabilities, in closed form.

    With coins ``p_j = exp(w_j - max w)`` and the order drawn as i.i.d. uniform arrival times,
    candidate ``r`` is returned when its coin lands heads and no earlier candidate's did:
    ``P(r) = p_r int_0^1 prod_{j != r} (1 - p_j t) dt``. The integrand is a polynomial of degree
    ``K - 1``, so Gauss-Legendre quadrature with ``ceil(K / 2)`` nodes is exact (to rounding).
    """
    w = exponential_mechanism_log_weights(utilities, epsilon, sensitivity)
    p = np.exp(np.asarray(w, dtype=np.float64).reshape(-1) - np.max(w))  # [K]
    nodes, weights = np.polynomial.legendre.leggauss(max(1, (p.size + 1) // 2))
    t, weights = 0.5 * (nodes + 1.0), 0.5 * weights  # [q] on [0, 1]
    factors = 1.0 - p[:, None] * t[None, :]  # [K, q]
    ones = np.ones_like(t)[None, :]
    before = np.cumprod(np.vstack([ones, factors[:-1]]), axis=0)  # [K, q]: prod over j < r
    after = np.cumprod(np.vstack([ones, factors[:0:-1]]), axis=0)[::-1]  # [K, q]: prod over j > r
    out = p * ((before * after) @ weights)  # no division: a factor may be 0 (p_j = 1 at t = 1)
    return out / np.sum(out)


def selection_probabilities(utilities: Any, epsilon: float, sensitivity: float, *,
                            mechanism: str = "exponential") -> np.ndarray:
    """The selection probabilities of ``mechanism`` (default ``softmax(epsilon u / (2 sensitivity))``,
    the exponential mechanism's; :func:`permute_and_flip_probabilities` for ``"permute_and_flip"``).
    Private when the utilities are."""
    if validate_mechanism(mechanism) == "permute_and_flip":
        return permute_and_flip_probabilities(utilities, epsilon, sensitivity)
    w = exponential_mechanism_log_weights(utilities, epsilon, sensitivity)
    w = w - np.max(w)
    p = np.exp(w)
    return p / np.sum(p)


def gumbel_max(log_weights: Any, seed: Optional[int] = None, *, sampler: str = "exact") -> Tuple[int, bool]:
    """``argmax(log_weights + Gumbel noise)``: a draw with probabilities ``softmax(log_weights)``;
    returns the index and whether it is reproducible.

    ``sampler="exact"`` (default): :func:`dpgp_gpflow.sampling.gumbel_argmax` (exact; an explicit seed
    falls back to seeded floating-point Gumbel noise). ``"float"``: floating-point noise from
    :func:`dpgp_gpflow.sampling.gumbel` (warns :class:`~dpgp_gpflow.PrivacyLeakWarning`).
    """
    sampling.validate_sampler(sampler)
    log_weights = np.asarray(log_weights, dtype=np.float64).reshape(-1)
    if sampler == "exact":
        return sampling.gumbel_argmax(log_weights, seed)
    sampling.warn_float_sampler("the exponential mechanism's draw")
    noise, reproducible = sampling.gumbel(log_weights.size, seed)
    return int(np.argmax(log_weights + noise)), reproducible


def draw(log_weights: Any, mechanism: str = "exponential", seed: Optional[int] = None) -> Tuple[int, bool]:
    """One draw of ``mechanism`` from the log-weights ``epsilon u / (2 Delta_u)``: the index and
    whether it is reproducible (an explicit ``seed``, which warns). Exact with ``seed=None``."""
    if validate_mechanism(mechanism) == "permute_and_flip":
        return sampling.permute_and_flip(log_weights, seed)
    return gumbel_max(log_weights, seed)


def exponential_mechanism(utilities: Any, epsilon: float, sensitivity: float, *,
                          seed: Optional[int] = None, sampler: str = "exact") -> Tuple[int, np.ndarray]:
    """One epsilon-DP draw ``argmax(epsilon u / (2 sensitivity) + Gumbel)``; returns ``(index, probabilities)``.

    The probabilities are private (functions of the utilities); only the index may be published.
    Charges nothing: :func:`select_hyperparameters` does the accounting. ``sampler``: see :func:`gumbel_max`.
    """
    index, _ = gumbel_max(exponential_mechanism_log_weights(utilities, epsilon, sensitivity), seed, sampler=sampler)
    return index, selection_probabilities(utilities, epsilon, sensitivity)


def permute_and_flip(utilities: Any, epsilon: float, sensitivity: float, *,
                     seed: Optional[int] = None) -> Tuple[int, np.ndarray]:
    """One epsilon-DP permute-and-flip draw with coins ``exp(epsilon (u - max u) / (2 sensitivity))``;
    returns ``(index, probabilities)``. The probabilities are private; only the index may be published.
    Charges nothing: :func:`select_hyperparameters` does the accounting."""
    index, _ = sampling.permute_and_flip(exponential_mechanism_log_weights(utilities, epsilon, sensitivity), seed)
    return index, permute_and_flip_probabilities(utilities, epsilon, sensitivity)
