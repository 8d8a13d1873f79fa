"""The noise optimiser: the noise covariance of a cloaking release, with its certificate.

Given the sensitivity vectors ``v_i`` (r x n, the columns of ``beta = U_r^T C``), the covariance
``M`` minimising ``log det M`` ("entropy") or ``tr M`` ("mse") s.t. ``v_i^T M^{-1} v_i <= 1``
(docs/mechanisms.md#noise-optimiser): the dual (:mod:`.dual`) solved on working sets
(:mod:`.working_set`), and certified by its duality gap. :func:`optimise_tensors` is the whole solve
as tensors (compiled per objective in :data:`OPTIMISERS`; the graph engine calls it inline).
Privacy never depends on convergence: callers recompute the sensitivity from the covariance returned
(:func:`.sensitivity.mahalanobis_sensitivity`).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from ..validation import check_count, check_real, validate_objective
from . import working_set
from .dual import COUNT_SPEC, MATRIX_SPEC, REAL_SPEC, VECTOR_SPEC, compile_per_objective
from .working_set import DenseColumns, WorkingSet, distinct_columns, cold_start, solve_noise

#: Default relative duality gap of every release's noise optimisation: the noise's objective
#: (expected squared error for "mse", log det per direction for "entropy") is certified within
#: 0.1% of the optimum, i.e. noise std within about 0.05%. Tighter tolerances cost working-set
#: rounds on large problems (nearly every training point's constraint is close to active there).
DEFAULT_TOL = 1e-3


class OptimiserCertificate(NamedTuple):
    """How close the returned noise covariance is to the optimum of its objective.

    ``gap`` is the duality gap of the feasible (rescaled) covariance: for "entropy" in log-det units
    (``r * log(1 + eps)``), for "mse" in trace units. ``relative_gap`` is ``gap / r`` for entropy
    (per-direction log-det excess) and ``gap / dual`` for mse (relative excess of the expected
    squared error). ``converged`` is ``relative_gap <= tol``.
    """

    objective: str
    gap: float
    relative_gap: float
    tol: float
    iterations: int
    converged: bool
    support: int


class NoiseCovariance(NamedTuple):
    """A noise covariance ``M = F F^T`` in the coordinates of the vectors it was optimised for.

    ``F = eigenvectors @ diag(scales)`` (r x r, invertible). ``weights`` are the dual weights (n).
    """

    eigenvectors: tf.Tensor
    scales: tf.Tensor
    weights: tf.Tensor
    certificate: OptimiserCertificate

    @property
    def factor(self) -> tf.Tensor:
        return self.eigenvectors * self.scales[None, :]


class OptimiserTerms(NamedTuple):
    """The compiled solve's outputs (tensors): the feasible covariance ``V diag(scales)^2 V^T`` and its certificate."""

    eigenvectors: tf.Tensor  #: [r, r]
    scales: tf.Tensor  #: [r]
    weights: tf.Tensor  #: [n] the dual weights
    gap: tf.Tensor  #: [] the duality gap
    relative_gap: tf.Tensor  #: []
    iterations: tf.Tensor  #: [] int32: Newton steps
    support: tf.Tensor  #: [] int32: points carrying dual weight


@check_shapes("vectors: [r, n]", "initial: [n]")
def optimise_tensors(vectors, initial, tol, max_iter, dense_points, duplicate_rtol, objective):
    """:func:`optimise_noise_covariance` on tensors (:class:`OptimiserTerms`). The columns are a
    :class:`~.working_set.DenseColumns`; the solve is
    :func:`~.working_set.solve_noise` over one representative of each group of identical columns.
    A warm start (``initial`` not all zero) starts from the support of ``initial``; a cold one from
    the provider's start set. Graph-safe."""
    r = tf.shape(vectors)[0]
    every = DenseColumns(vectors, dense_points)
    distinct = DenseColumns(vectors, dense_points, distinct_columns(vectors, duplicate_rtol))
    warm = tf.reduce_max(initial) > 0.0

    def warm_start():
        idx = tf.boolean_mask(distinct.members, tf.gather(initial, distinct.members) > 0.0)
        return WorkingSet(idx, tf.gather(vectors, idx, axis=1), tf.gather(initial, idx))

    start = tf.cond(warm, warm_start, lambda: cold_start(distinct, r, objective))
    # no two columns merged: distinct holds every column, in order (its loop's last pass certifies)
    solution = solve_noise(distinct, every, start, warm, objective, tol, max_iter,
                           same=tf.equal(distinct.count(), every.count()))
    weights = tf.tensor_scatter_nd_update(tf.zeros_like(initial), solution.work.indices[:, None], solution.work.weights)
    support = tf.reduce_sum(tf.cast(weights > 1e-8 * tf.reduce_max(weights), tf.int32))
    return OptimiserTerms(solution.eigenvectors, solution.scales, weights, solution.gap, solution.relative_gap,
                          solution.iterations, support)


#: The compiled noise optimiser, one per objective: stable signatures (any shapes, no retracing).
OPTIMISERS = compile_per_objective(optimise_tensors, [MATRIX_SPEC, VECTOR_SPEC, REAL_SPEC, COUNT_SPEC, COUNT_SPEC,
                                                     REAL_SPEC])


@check_shapes("vectors: [r, n]")
def optimise_noise_covariance(
    vectors: tf.Tensor,
    objective: str = "mse",
    *,
    tol: float = DEFAULT_TOL,
    max_iter: int = 2000,
    initial_weights: Optional[tf.Tensor] = None,
) -> NoiseCovariance:
    """Noise covariance ``M`` (r x r) minimising ``log det M`` or ``tr M`` s.t. ``v_i^T M^{-1} v_i <= 1``.

    ``vectors`` holds the sensitivity vectors as columns (rank r, full row rank). The returned
    covariance is feasible (rescaled so that ``max_i v_i^T M^{-1} v_i = 1`` up to rounding) and
    carries a duality-gap certificate. Deterministic: no random restarts. ``initial_weights`` (n,
    non-negative; e.g. the ``weights`` of a looser solve of the same problem) warm-start the dual.
    The whole solve is one compiled call (:data:`OPTIMISERS`); this wrapper validates and reports.

    Privacy assumption: none here; callers must recompute the sensitivity from the returned ``M``.
    """
    validate_objective(objective)
    if not check_real("tol", tol) > 0.0:
        raise ValueError(f"tol must be > 0, got {tol!r}")
    max_iter = check_count("max_iter", max_iter)
    vectors = tf.convert_to_tensor(vectors, dtype=tf.float64)
    r, n = int(vectors.shape[0]), int(vectors.shape[1])
    if r == 0 or n == 0:
        raise ValueError(f"need at least one sensitivity vector of positive dimension, got shape {(r, n)}")
    initial = np.zeros(n)
    if initial_weights is not None:
        initial = np.asarray(initial_weights, dtype=np.float64).reshape(-1)
        if initial.shape != (n,) or not np.all(np.isfinite(initial)) or np.any(initial < 0.0) or initial.max() <= 0.0:
            raise ValueError(f"initial_weights must be {n} finite non-negative numbers, not all zero")
    out = OPTIMISERS[objective](
        vectors, tf.constant(initial), tf.constant(float(tol), tf.float64), tf.constant(int(max_iter), tf.int32),
        tf.constant(int(working_set.DENSE_POINTS), tf.int32),
        tf.constant(float(working_set.DUPLICATE_RTOL), tf.float64))
    return NoiseCovariance(out.eigenvectors, out.scales, out.weights, certificate_of(
        objective, out.gap, out.relative_gap, tol, out.iterations, out.support))


def certificate_of(objective: str, gap, relative_gap, tol: float, iterations, support) -> OptimiserCertificate:
    """The :class:`OptimiserCertificate` of a compiled solve's outputs (host values)."""
    return OptimiserCertificate(objective=objective, gap=float(gap), relative_gap=float(relative_gap), tol=float(tol),
                                iterations=int(iterations), converged=bool(float(relative_gap) <= tol),
                                support=int(support))


