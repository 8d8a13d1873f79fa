"""The exponential mechanism over utilities (Gumbel-max with noise from :mod:`dpgp_gpflow.sampling`).

Floating-point sampling of the exponential mechanism is not exact (Ilvento 2020); this is the usual
caveat, not a known attack on this implementation (``docs/privacy_model.md#randomness``).
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


def gumbel_max(log_weights: Any, seed: Optional[int] = None) -> Tuple[int, bool]:
    """``argmax(log_weights + Gumbel noise)``: a draw with probabilities ``softmax(log_weights)``
    (noise from :func:`dpgp_gpflow.sampling.gumbel`); returns the index and whether it is reproducible."""
    log_weights = np.asarray(log_weights, dtype=np.float64).reshape(-1)
    noise, reproducible = sampling.gumbel(log_weights.size, seed)
    return int(np.argmax(log_weights + noise)), reproducible


def exponential_mechanism(utilities: Any, epsilon: float, sensitivity: float, *,
                          seed: Optional[int] = None) -> Tuple[int, np.ndarray]:
    """One epsilon-DP draw ``argmax(epsilon u / (2 sensitivity) + Gumbel)``; returns ``(index, probabilities)``.

    The probabilities are private (functions of the utilities); only the index may be published.
    Charges nothing: :func:`select_hyperparameters` does the accounting.
    """
    index, _ = gumbel_max(exponential_mechanism_log_weights(utilities, epsilon, sensitivity), seed)
    return index, selection_probabilities(utilities, epsilon, sensitivity)
