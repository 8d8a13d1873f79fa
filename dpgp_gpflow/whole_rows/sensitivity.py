"""The sensitivity of the whole-row statistics, and the one vector they are released as.

Neighbours differ in one whole row: ``(x, y)`` replaced by any ``(x', y')`` with ``x'`` in the public box and
``y'`` in the bounds (``|y_c| <= d / 2``). With unit-scale features (``||phi(x)|| <= 1`` for every ``x``,
:mod:`dpgp_gpflow.whole_rows.features`) the parts move by at most (docs/whole_rows.md#sensitivity)

    ||phi phi^T - phi' phi'^T||_F <= sqrt(2),   ||phi y_c - phi' y_c'|| <= d,   |y_c^2 - y_c'^2| <= d^2 / 4

(the first: ``||u u^T - v v^T||_F^2 = |u|^4 + |v|^4 - 2 (u.v)^2 <= 2``). Each part is scaled so that its
bound is its public share ``w_part`` of a unit total, with ``w_S^2 + w_b^2 + w_q^2 = 1`` (:data:`DEFAULT_SHARES`),
and the three are released as one vector (:func:`packed`) whose L2 shift between neighbours is then at most
``sqrt(w_S^2 + w_b^2 + w_q^2) = 1``; the three bounds are not reached by the same neighbours, and
:func:`joint_bound` gives the smaller exact bound of the sum of squares that the release uses.
``S`` is symmetric: it enters through its upper triangle with the off-diagonal entries multiplied by
``sqrt(2)``, so that the vector's L2 norm of ``S``'s part is ``S``'s Frobenius norm. :func:`rounding_factor`
inflates the sensitivity for the floating-point error of the sums. The formula (everything but the
packing) lives in :mod:`.bounds`, without TensorFlow, and is re-exported here.

Privacy assumption: public quantities only (the bounds' width, the shares, the shapes and the chunking).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Tuple

import numpy as np

from .bounds import (
    DEFAULT_SHARES,
    MAX_ROUNDING_SLACK,
    PARTS,
    Scales,
    entry_noise_std,
    joint_bound,
    part_bounds,
    person_sensitivity,
    release_sensitivity,
    rounding_factor,
    rounding_slack,
    statistic_dimension,
    statistic_scales,
    validate_shares,
)

__all__ = ["DEFAULT_SHARES"]


def _upper(m: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row and column indices of the upper triangle (diagonal included, row by row) and their weights
    (1 on the diagonal, sqrt(2) off it)."""
    rows, cols = np.triu_indices(int(m))
    return rows, cols, np.where(rows == cols, 1.0, math.sqrt(2.0))


def packed(S: Any, b: Any, q: Any, scales: Scales) -> np.ndarray:
    """The released vector [K] ``[a_S w * triu(S), a_b b, a_q q]`` (``w``: 1 on the diagonal, sqrt(2) off it), in
    NumPy (what the mechanism noises): its L2 shift between whole-row neighbours is at most 1 (before rounding,
    :func:`rounding_factor`). ``ValueError`` for an ``S`` that is not square."""
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"S must be a square [M, M] matrix, got shape {S.shape}")
    rows, cols, weights = _upper(S.shape[0])
    return np.concatenate([S[rows, cols] * (scales.S * weights), np.asarray(b, dtype=np.float64) * scales.b,
                           np.reshape(np.asarray(q, dtype=np.float64) * scales.q, [1])])


def unpack(v: Any, scales: Scales, m: int) -> Dict[str, np.ndarray]:
    """``{"S": [M, M] symmetric, "b": [M], "q": []}`` of a packed vector (the inverse of :func:`packed`;
    post-processing when ``v`` is the released vector)."""
    v = np.asarray(v, dtype=np.float64).reshape(-1)
    m = int(m)
    if v.size != statistic_dimension(m):
        raise ValueError(f"a packed vector for M = {m} has {statistic_dimension(m)} entries, got {v.size}")
    rows, cols, weights = _upper(m)
    k = rows.size
    S = np.zeros((m, m))
    S[rows, cols] = v[:k] / (scales.S * weights)
    S[cols, rows] = S[rows, cols]
    return {"S": S, "b": v[k:k + m] / scales.b, "q": np.asarray(v[-1] / scales.q)}


