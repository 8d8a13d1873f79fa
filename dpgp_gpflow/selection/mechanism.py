"""The exponential mechanism over utilities, drawn by :mod:`dpgp_gpflow.sampling`.

The draw is exact by default (:func:`dpgp_gpflow.sampling.gumbel_argmax`: OpenDP's report-noisy-max
with Gumbel noise, compared exactly; docs/exact_sampling.md). ``sampler="float"`` is the earlier
floating-point Gumbel-max, which is not exact (Ilvento 2020), for speed comparisons only (warns).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from .. import sampling
from ..calibration import exponential_mechanism_log_weights

__all__ = ["exponential_mechanism", "gumbel_max", "selection_probabilities"]


def selection_probabilities(utilities: Any, epsilon: float, sensitivity: float) -> np.ndarray:
    """``softmax(epsilon u / (2 sensitivity))``: the exponential mechanism's selection probabilities."""
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


def exponential_mechanism(utilities: Any, epsilon: float, sensitivity: float, *,
                          seed: Optional[int] = None, sampler: str = "exact") -> Tuple[int, np.ndarray]:
    """One epsilon-DP draw ``argmax(epsilon u / (2 sensitivity) + Gumbel)``; returns ``(index, probabilities)``.

    The probabilities are private (functions of the utilities); only the index may be published.
    Charges nothing: :func:`select_hyperparameters` does the accounting. ``sampler``: see :func:`gumbel_max`.
    """
    index, _ = gumbel_max(exponential_mechanism_log_weights(utilities, epsilon, sensitivity), seed, sampler=sampler)
    return index, selection_probabilities(utilities, epsilon, sensitivity)
