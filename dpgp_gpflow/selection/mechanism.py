"""The selection mechanisms over utilities, drawn by :mod:`dpgp_gpflow.sampling`: the generalised
exponential mechanism (Raskhodnikova & Smith 2016; the default), the exponential mechanism
(McSherry & Talwar 2007) and permute-and-flip (McKenna & Sheldon 2020).

Each candidate ``i`` has its own public sensitivity ``Delta_i`` (its utility moves by at most
``Delta_i`` between neighbouring datasets). The **generalised exponential mechanism** scores
candidate ``i`` by

    s_i = min_j ((u_i - t Delta_i) - (u_j - t Delta_j)) / (Delta_i + Delta_j),   t = 2 ln(K / beta) / epsilon,

which moves by at most 1 between neighbours (each numerator by at most ``Delta_i + Delta_j``; a
minimum of 1-sensitive functions is 1-sensitive), and runs the exponential mechanism on ``s`` with
sensitivity 1: epsilon-DP for any public ``t >= 0`` (:func:`generalised_scores`;
docs/selection.md#the-generalised-exponential-mechanism). No configuration needs dropping and
no configuration's large sensitivity flattens the others' probabilities.

The exponential mechanism and permute-and-flip use ``w = epsilon u / (2 Delta_u)`` with
``Delta_u = max_i Delta_i`` (:func:`~dpgp_gpflow.calibration.exponential_mechanism_log_weights`),
epsilon-DP when ``Delta_u`` bounds the change of every utility. Permute-and-flip
visits the candidates in a random order and stops at the first whose coin, heads with
probability ``exp(w_r - max w)``, lands heads; its expected utility is never below the exponential
mechanism's (McKenna & Sheldon, Theorem 2).

The draws are exact by default (:func:`dpgp_gpflow.sampling.gumbel_argmax`,
:func:`dpgp_gpflow.sampling.permute_and_flip_index`; docs/exact_sampling.md). ``sampler="float"`` is the
earlier floating-point Gumbel-max of the exponential mechanism, which is not exact (Ilvento 2020),
for speed comparisons only (warns).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import numpy as np

from .. import sampling
from ..calibration import exponential_mechanism_log_weights
from ..validation import validate_epsilon

__all__ = ["MECHANISMS"]

#: The selection mechanisms :func:`~dpgp_gpflow.selection.select_hyperparameters` offers (the first is the default).
MECHANISMS = ("generalised_exponential", "exponential", "permute_and_flip")
#: How each mechanism is named in the accountant's ledger.
MECHANISM_NAMES = {"generalised_exponential": "generalised exponential mechanism",
                   "exponential": "exponential mechanism", "permute_and_flip": "permute-and-flip"}
#: The generalised exponential mechanism's ``beta``: ``t = 2 ln(K / beta) / epsilon``. With probability
#: at least ``1 - beta`` its choice ``i`` has ``u_i >= max_j (u_j - 2 t Delta_j)``; 1/2 states that
#: guarantee for the median draw. It shapes the utility only, never the privacy.
DEFAULT_BETA = 0.5


#: Rows of the K x K pairwise scores formed at once by :func:`generalised_scores`.
_SCORE_BLOCK = 1024


def validate_mechanism(mechanism: Any) -> str:
    """One of :data:`MECHANISMS`; anything else raises ``ValueError``."""
    if not isinstance(mechanism, str) or mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
    return mechanism


def validate_beta(beta: Any) -> float:
    """``beta`` in (0, 1]; anything else raises ``ValueError`` (``TypeError`` if not a real number)."""
    if isinstance(beta, bool) or not isinstance(beta, (int, float, np.integer, np.floating)):
        raise TypeError(f"beta must be a real number, got {type(beta).__name__}")
    beta = float(beta)
    if not 0.0 < beta <= 1.0:
        raise ValueError(f"beta must be in (0, 1], got {beta}")
    return beta


def _sensitivities(sensitivity: Any, size: int) -> np.ndarray:
    """``sensitivity`` (a scalar or one per candidate) as a positive, finite [K] array."""
    sens = np.broadcast_to(np.asarray(sensitivity, dtype=np.float64), (size,)) if np.ndim(sensitivity) == 0 \
        else np.asarray(sensitivity, dtype=np.float64).reshape(-1)
    if sens.shape != (size,):
        raise ValueError(f"give one sensitivity or one per candidate ({size}), got shape {np.shape(sensitivity)}")
    if not np.all(np.isfinite(sens)) or not np.all(sens > 0.0):
        raise ValueError("sensitivities must be finite and > 0")
    return sens


def generalised_scores(utilities: Any, sensitivities: Any, epsilon: float, beta: float = DEFAULT_BETA) -> np.ndarray:
    """The generalised exponential mechanism's normalised scores (Raskhodnikova & Smith 2016):

        s_i = min_j ((u_i - t D_i) - (u_j - t D_j)) / (D_i + D_j),   t = 2 ln(K / beta) / epsilon.

    Each ``s_i <= 0`` (``j = i`` gives 0) and moves by at most 1 between neighbouring datasets when
    ``u_i`` moves by at most the public ``D_i``. Private when the utilities are. O(K^2) time, memory
    in blocks of :data:`_SCORE_BLOCK` rows.
    """
    u = np.asarray(utilities, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(u)):
        raise ValueError("utilities must be finite")
    sens = _sensitivities(sensitivities, u.size)
    t = 2.0 * math.log(u.size / validate_beta(beta)) / validate_epsilon(epsilon)
    a = u - t * sens
    return np.concatenate([np.min((a[i:i + _SCORE_BLOCK, None] - a[None, :])
                                  / (sens[i:i + _SCORE_BLOCK, None] + sens[None, :]), axis=1)
                           for i in range(0, a.size, _SCORE_BLOCK)])


def log_weights(utilities: Any, sensitivities: Any, epsilon: float, mechanism: str = "generalised_exponential",
                beta: float = DEFAULT_BETA) -> np.ndarray:
    """The log-weights every mechanism draws from: ``epsilon s / 2`` with the generalised scores
    (sensitivity 1), or ``epsilon u / (2 max_i D_i)`` for the exponential mechanism and
    permute-and-flip. ``sensitivities``: one per candidate, or one for all. Private when the
    utilities are."""
    u = np.asarray(utilities, dtype=np.float64).reshape(-1)
    sens = _sensitivities(sensitivities, u.size)
    if validate_mechanism(mechanism) == "generalised_exponential":
        return exponential_mechanism_log_weights(generalised_scores(u, sens, epsilon, beta), epsilon, 1.0)
    return exponential_mechanism_log_weights(u, epsilon, float(np.max(sens)))


def _permute_and_flip_from_log_weights(w: np.ndarray) -> np.ndarray:
    """Permute-and-flip's probabilities from its log-weights ``w`` (closed form; see
    :func:`permute_and_flip_probabilities`)."""
    p = np.exp(np.asarray(w, dtype=np.float64).reshape(-1) - np.max(w))  # [K]
    nodes, weights = np.polynomial.legendre.leggauss(max(1, (p.size + 1) // 2))
    t, weights = 0.5 * (nodes + 1.0), 0.5 * weights  # [q] on [0, 1]
    factors = 1.0 - p[:, None] * t[None, :]  # [K, q]
    ones = np.ones_like(t)[None, :]
    before = np.cumprod(np.vstack([ones, factors[:-1]]), axis=0)  # [K, q]: prod over j < r
    after = np.cumprod(np.vstack([ones, factors[:0:-1]]), axis=0)[::-1]  # [K, q]: prod over j > r
    out = p * ((before * after) @ weights)  # no division: a factor may be 0 (p_j = 1 at t = 1)
    return out / np.sum(out)


def permute_and_flip_probabilities(utilities: Any, epsilon: float, sensitivity: float) -> np.ndarray:
    """Permute-and-flip's selection probabilities, in closed form.

    With coins ``p_j = exp(w_j - max w)`` and the order drawn as i.i.d. uniform arrival times,
    candidate ``r`` is returned when its coin lands heads and no earlier candidate's did:
    ``P(r) = p_r int_0^1 prod_{j != r} (1 - p_j t) dt``. The integrand is a polynomial of degree
    ``K - 1``, so Gauss-Legendre quadrature with ``ceil(K / 2)`` nodes is exact (to rounding).
    """
    return _permute_and_flip_from_log_weights(exponential_mechanism_log_weights(utilities, epsilon, sensitivity))


def selection_probabilities(utilities: Any, epsilon: float, sensitivity: Any, *,
                            mechanism: str = "generalised_exponential", beta: float = DEFAULT_BETA) -> np.ndarray:
    """The selection probabilities of ``mechanism`` over ``utilities`` with ``sensitivity`` (one per
    candidate, or one for all): ``softmax`` of :func:`log_weights` for the (generalised) exponential
    mechanism, the closed form of :func:`permute_and_flip_probabilities` for ``"permute_and_flip"``.
    Private when the utilities are."""
    return probabilities_of(log_weights(utilities, sensitivity, epsilon, mechanism, beta), mechanism)


def probabilities_of(weights: Any, mechanism: str = "generalised_exponential") -> np.ndarray:
    """The selection probabilities of ``mechanism`` drawing from the log-weights ``weights``
    (:func:`log_weights`): their softmax, or permute-and-flip's closed form. Private when the weights are."""
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if validate_mechanism(mechanism) == "permute_and_flip":
        return _permute_and_flip_from_log_weights(w)
    p = np.exp(w - np.max(w))
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


def draw(log_weights: Any, mechanism: str = "generalised_exponential", seed: Optional[int] = None) -> Tuple[int, bool]:
    """One draw of ``mechanism`` from its log-weights (:func:`log_weights`): the index and whether it
    is reproducible (an explicit ``seed``, which warns). Exact with ``seed=None``: Gumbel-max for
    the (generalised) exponential mechanism, a random order and exact coins for permute-and-flip."""
    if validate_mechanism(mechanism) == "permute_and_flip":
        return sampling.permute_and_flip_index(log_weights, seed)
    return gumbel_max(log_weights, seed)


def exponential_mechanism(utilities: Any, epsilon: float, sensitivity: float, *,
                          seed: Optional[int] = None, sampler: str = "exact") -> Tuple[int, np.ndarray]:
    """One epsilon-DP draw ``argmax(epsilon u / (2 sensitivity) + Gumbel)``; returns ``(index, probabilities)``.

    The probabilities are private (functions of the utilities); only the index may be published.
    Charges nothing: :func:`select_hyperparameters` does the accounting. ``sampler``: see :func:`gumbel_max`.
    """
    index, _ = gumbel_max(exponential_mechanism_log_weights(utilities, epsilon, sensitivity), seed, sampler=sampler)
    return index, selection_probabilities(utilities, epsilon, sensitivity, mechanism="exponential")


def generalised_exponential_mechanism(utilities: Any, epsilon: float, sensitivities: Any, *,
                                      beta: float = DEFAULT_BETA, seed: Optional[int] = None) -> Tuple[int, np.ndarray]:
    """One epsilon-DP draw of the generalised exponential mechanism (:func:`generalised_scores`, then
    exact Gumbel-max at sensitivity 1); returns ``(index, probabilities)``. ``sensitivities``: one
    per candidate (public). The probabilities are private; only the index may be published.
    Charges nothing: :func:`select_hyperparameters` does the accounting."""
    w = log_weights(utilities, sensitivities, epsilon, "generalised_exponential", beta)
    index, _ = gumbel_max(w, seed)
    return index, probabilities_of(w)


def permute_and_flip(utilities: Any, epsilon: float, sensitivity: float, *,
                     seed: Optional[int] = None) -> Tuple[int, np.ndarray]:
    """One epsilon-DP permute-and-flip draw with coins ``exp(epsilon (u - max u) / (2 sensitivity))``;
    returns ``(index, probabilities)``. The probabilities are private; only the index may be published.
    Charges nothing: :func:`select_hyperparameters` does the accounting."""
    index, _ = sampling.permute_and_flip_index(exponential_mechanism_log_weights(utilities, epsilon, sensitivity), seed)
    return index, permute_and_flip_probabilities(utilities, epsilon, sensitivity)
