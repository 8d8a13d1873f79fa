"""Choosing the DP noise covariance for a linear release ``v = C y`` (the "lambda optimiser").

Pure TensorFlow functions of tensors, float64 throughout; the model classes build the cloaking
matrix ``C`` and :mod:`dpgp_gpflow.release` draws the noise. Privacy assumption: everything here
depends on the cloaking matrix only, which is a function of public inputs and public
hyperparameters; the private outputs never enter.

The maths (docs/mechanisms.md#cloaking and #noise-optimiser):

* ``C`` (k x n) is factored into its column space, ``C ~ U_r beta`` with ``U_r`` (k x r) orthonormal
  and ``beta = U_r^T C`` (r x n) the exact sensitivity vectors of the projected release.
* The noise covariance ``M`` (r x r, in ``U_r`` coordinates) minimises ``log det M`` ("entropy",
  the papers) or ``trace M`` ("mse", the expected squared error the noise adds) subject to
  ``beta_i^T M^{-1} beta_i <= 1``. We solve the Lagrange dual over one weight per training point,
  ``g(l) = sum(l) - log det S`` or ``sum(l) - 2 tr S^{1/2}`` with ``S = beta diag(l) beta^T``, by
  a log-barrier Newton method on a working set of points (gradient ``1 - q`` in closed form), and
  stop on the duality gap: a certificate, not a step-size rule.
* Privacy never depends on convergence: the sensitivity is recomputed from the covariance
  actually returned (:func:`mahalanobis_sensitivity`).
"""

from __future__ import annotations

import math
from typing import Iterator, NamedTuple, Optional

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from . import linalg
from .validation import OBJECTIVES, Objective, validate_objective

__all__ = [
    "DEFAULT_TOL",
    "OBJECTIVES",
    "ColumnSpace",
    "NoiseCovariance",
    "Objective",
    "OptimiserCertificate",
    "column_space",
    "column_spaces",
    "singular_pairs",
    "mahalanobis_sensitivity",
    "noise_std_lower_bound",
    "optimise_noise_covariance",
    "projection_rows",
    "row_norms",
    "OPTIMISERS",
    "certificate_of",
    "compile_per_objective",
    "mahalanobis_terms",
    "max_mahalanobis_norm2",
    "optimise_tensors",
    "projection_terms",
]


#: Default relative duality gap of every release's noise optimisation: the noise's objective
#: (expected squared error for "mse", log det per direction for "entropy") is certified within
#: 0.1% of the optimum, i.e. noise std within about 0.05%. Tighter tolerances cost working-set
#: rounds on large problems (nearly every training point's constraint is close to active there).
DEFAULT_TOL = 1e-3
#: Candidate relative singular-value tolerances tried (in order) when ``rtol`` is chosen automatically.
AUTO_RTOLS = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10)
#: Smallest rtol for the "mse" objective: its dual works with S in output coordinates, whose
#: condition number grows like rtol^-2; below this float64 eigen-decompositions lose the small directions.
MIN_MSE_RTOL = 1e-7
#: Working-set solves are used when there are more training points than this.
DENSE_POINTS = 500
#: Relative gap of the first, loose stage before points far from the support are pruned.
PRUNE_TOL = 1e-2
#: Working sets up to this size are solved in one stage (pruning would not pay for a restart).
PRUNE_MIN_POINTS = 300
#: The barrier weight is decreased once the squared Newton decrement is below this (loosely centred) ...
CENTRED_DECREMENT = 1e-6
#: ... by this factor (or to a tenth of the duality gap per point, if smaller).
MU_FACTOR = 0.05
MU_GAP_DIV = 10.0
#: The first barrier weight is the duality gap per point divided by this: the (loosely centred)
#: path is joined close to the optimum, which matters most on warm restarts of the working-set
#: rounds (a large first weight pushes warm weights away from the optimum before coming back).
MU_START_DIV = 100.0
#: Primal-dual rounds set the barrier parameter to this fraction of the mean complementarity ``l_i s_i``
#: after every step (no centring steps).
PRIMAL_DUAL_SIGMA = 0.1
#: Relative residual at which conjugate gradients stop (inexact Newton: the line search and the
#: duality-gap stop make the step's accuracy a matter of speed only, never of the certificate).
CG_RTOL = 1e-2
#: The mse preconditioner is factorised on the points whose barrier curvature is below this times their
#: own dual curvature; the rest (far from the support, held up by the barrier) get its diagonal.
PRECONDITIONER_BLOCK = 1.0


class ColumnSpace(NamedTuple):
    """The column space of a cloaking matrix ``C`` (k x n), truncated at ``rtol``.

    ``basis`` (k x r) has orthonormal columns; ``vectors = basis^T C`` (r x n) are the exact
    sensitivity vectors of the projected release ``basis basis^T C y``; ``singular_values`` are
    those kept (r); ``residual`` bounds the 2-norm of the discarded part ``C - basis vectors``: the
    largest singular value discarded (0 if none), plus the sampling error of a randomised SVD, so
    the projection moves ``C y`` by at most ``residual * ||y||_2``.
    """

    basis: tf.Tensor
    vectors: tf.Tensor
    singular_values: tf.Tensor
    residual: float
    rtol: float

    @property
    def rank(self) -> int:
        return int(self.vectors.shape[0])


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


@check_shapes("C: [k, n]")
def column_space(C: tf.Tensor, rtol: float) -> ColumnSpace:
    """Factor ``C`` into its column space, keeping the directions with ``s_j > rtol * s_1``.

    The singular pairs of :func:`singular_pairs`; nothing k x k is formed when k > n. ``rtol`` must be in [0, 1).
    """
    return next(column_spaces(C, (rtol,)))


def column_spaces(C, rtols) -> Iterator[ColumnSpace]:
    """:func:`column_space` for each tolerance in ``rtols`` (one factorisation; repeated ranks are skipped).

    ``C`` may also be given factored as a pair ``(A, B)`` with ``C = A B`` (A: k x m, B: m x n), as
    sparse models produce it: then only a thin QR of ``A`` and the singular pairs of an m x n matrix
    are needed. Those come from :func:`singular_pairs` (an eigendecomposition of the smaller Gram
    matrix, or an SVD); matrices whose smaller side exceeds ``RANDOMISED_SVD_MIN`` get a randomised
    SVD (:func:`_leading_singular_triplets`). ``residual`` is then a bound, not the singular value.
    """
    rtols = tuple(float(t) for t in rtols)
    for rtol in rtols:
        if not 0.0 <= rtol < 1.0:
            raise ValueError(f"rtol must be in [0, 1), got {rtol}")
    if isinstance(C, (tuple, list)):
        A, B = (tf.convert_to_tensor(x, dtype=tf.float64) for x in C)
        Q, R = tf.linalg.qr(A)  # Q: [k, m'], R: [m', m]
        inner = tf.linalg.matmul(R, B)  # [m', n]: C in the coordinates of Q
    else:
        Q = None
        inner = tf.convert_to_tensor(C, dtype=tf.float64)
    if min(inner.shape) > RANDOMISED_SVD_MIN and min(rtols) > 0.0:
        s, u, outside = _leading_singular_triplets(inner, min(rtols))
    else:
        s, u, outside = singular_pairs(inner, min(rtols))
        outside = float(outside)
    s_np = s.numpy()
    if s_np.size == 0 or not np.all(np.isfinite(s_np)) or s_np[0] <= 0.0:
        raise ValueError("the cloaking matrix is zero or not finite: nothing to release privately")
    ranks = [int(np.sum(s_np > rtol * s_np[0])) for rtol in rtols]
    widest = max(ranks)  # the spaces are nested: the widest's coordinates, computed once, hold them all
    coordinates = tf.linalg.matmul(u[:, :widest], inner, transpose_a=True)  # [r_max, n]
    if Q is not None:
        u = tf.linalg.matmul(Q, u[:, :widest])  # [k, r_max]
    seen = set()
    for rtol, r in zip(rtols, ranks):
        if r in seen:
            continue
        seen.add(r)
        residual = (float(s_np[r]) if r < s_np.size else 0.0) + outside
        # [k, r] orthonormal basis and [r, n] exact sensitivity vectors (its coordinates of C)
        yield ColumnSpace(u[:, :r], coordinates[:r], s[:r], residual, rtol)


#: Matrices whose smaller side is at most this get their singular pairs from an eigendecomposition
#: of the smaller Gram matrix (:func:`singular_pairs`): faster than TensorFlow's SVD there (1,000 x
#: 1,000: about 0.25 s against 0.43 s; 100 x 10^5: 0.05 s against 1.2 s), while its eigensolver
#: slows sharply beyond (2,000 x 2,000: about 6 s).
GRAM_EIGH_MAX = 1500
#: ... and only when every tolerance is at least this: the Gram matrix squares the singular values,
#: so those far below ``sqrt(eps) s_1`` are rounding there (the SVD resolves them, and is used then).
GRAM_MIN_RTOL = 1e-7


def _gram_pairs(C: tf.Tensor, min_rtol: float):
    """Singular values (all, descending), left singular vectors (those above ``min_rtol s_1``, at
    least) and the rounding bound of :func:`singular_pairs`, from the eigendecomposition of the
    smaller of ``C C^T`` and ``C^T C``. Graph-safe."""
    k, n = tf.shape(C)[0], tf.shape(C)[1]
    eps = float(np.finfo(np.float64).eps)

    def eigen(G):
        lam, vec = tf.linalg.eigh(0.5 * (G + tf.transpose(G)))
        return tf.reverse(lam, [0]), tf.reverse(vec, [1])

    def left():  # k <= n: the eigenvectors of C C^T are the left singular vectors
        return eigen(tf.linalg.matmul(C, C, transpose_b=True))

    def right():  # k > n: u_j = C v_j / s_j for the kept j, re-orthonormalised (Cholesky QR)
        lam, V = eigen(tf.linalg.matmul(C, C, transpose_a=True))
        s = tf.sqrt(tf.maximum(lam, 0.0))
        p = tf.maximum(tf.reduce_sum(tf.cast(s > min_rtol * s[0], tf.int32)), 1)
        U = tf.linalg.matmul(C, V[:, :p]) / s[None, :p]
        L = tf.linalg.cholesky(tf.linalg.matmul(U, U, transpose_a=True))
        return lam, tf.transpose(tf.linalg.triangular_solve(L, tf.transpose(U), lower=True))

    lam, u = tf.cond(k <= n, left, right)
    s = tf.sqrt(tf.maximum(lam, 0.0))
    # Weyl: the computed Gram matrix and its eigensolver err by at most (n + k) eps ||C||_F^2 in 2-norm,
    # so the discarded part's squared 2-norm is at most the next eigenvalue plus that.
    p = tf.cast(k + n, tf.float64)
    return s, u, tf.sqrt(p * eps * tf.reduce_sum(tf.square(C)))


@check_shapes("C: [k, n]", "return[0]: [p]", "return[1]: [k, q]", "return[2]: []")
def singular_pairs(C: tf.Tensor, min_rtol: float):
    """The singular values ``s`` of ``C`` (descending), its left singular vectors ``u`` (orthonormal;
    at least those with ``s_j > min_rtol s_1``) and ``outside``, a bound on the rounding of the
    discarded part: ``||C - u_r u_r^T C||_2 <= s_{r+1} + outside``. One rule for the in-memory and
    graph-mode releases (the streamed one takes the SVD of a small m x m factor): an eigendecomposition of the smaller Gram matrix where the smaller side is at most ``GRAM_EIGH_MAX``
    and ``min_rtol >= GRAM_MIN_RTOL`` (``outside`` its rounding bound), a full SVD otherwise
    (``outside = 0``). Graph-safe (``C`` may have unknown dimensions). Public: ``C`` only.
    """
    C = tf.convert_to_tensor(C, tf.float64)
    svd = lambda: (*tf.linalg.svd(C, full_matrices=False)[:2], tf.zeros([], tf.float64))  # noqa: E731
    if float(min_rtol) < GRAM_MIN_RTOL:
        return svd()
    return tf.cond(tf.minimum(tf.shape(C)[0], tf.shape(C)[1]) <= GRAM_EIGH_MAX,
                   lambda: _gram_pairs(C, float(min_rtol)), svd)


#: Matrices whose smaller side is larger than this get a randomised SVD in :func:`column_spaces`.
RANDOMISED_SVD_MIN = 2000
#: Initial sample size of the randomised SVD (doubled until the sample reaches below the smallest rtol).
RANDOMISED_SVD_SAMPLE = 1024
#: Most power (subspace) iterations of the randomised SVD, each tried only when the sample does not
#: yet reach below the smallest tolerance (at 5,000 x 3,000 the plain 1,024-column sample already
#: reaches 4e-14 s_1: none is needed, and each costs two products and a QR).
RANDOMISED_SVD_POWER = 2


def _leading_singular_triplets(C: tf.Tensor, rtol: float):
    """Leading singular values ``s`` and left vectors ``u`` of ``C`` (k x n) down to below ``rtol s_1``,
    by a randomised range finder (Halko, Martinsson & Tropp 2011), with subspace iterations only
    while the sample falls short, and ``outside = ||C - Q Q^T C||_F`` for the sampled orthonormal
    range ``Q`` (so ``||C - u_r u_r^T C||_2 <= s_{r+1} + outside``). Matrix products and QR only; a
    fixed-seed Gaussian test matrix makes it deterministic (``C`` is public, so the seed carries no
    privacy role). Falls back to the full SVD when the sample would reach half the smaller side.
    """
    k, n = (int(x) for x in C.shape)
    p = RANDOMISED_SVD_SAMPLE
    while 2 * p <= min(k, n):
        omega = tf.random.stateless_normal([n, p], seed=[20181, p], dtype=C.dtype)
        Q, _ = tf.linalg.qr(tf.linalg.matmul(C, omega))  # [k, p]
        for power in range(RANDOMISED_SVD_POWER + 1):
            if power:
                Q, _ = tf.linalg.qr(tf.linalg.matmul(C, tf.linalg.matmul(C, Q, transpose_a=True)))
            B = tf.linalg.matmul(Q, C, transpose_a=True)  # [p, n]
            s, u_b, _ = tf.linalg.svd(B, full_matrices=False)
            if s[-1] <= 0.1 * rtol * s[0]:  # the sample reaches well below the smallest tolerance
                outside = float(tf.norm(C - tf.linalg.matmul(Q, B)))
                return s, tf.linalg.matmul(Q, u_b), outside
        p *= 2
    s, u, _ = tf.linalg.svd(C, full_matrices=False)
    return s, u, 0.0


def _weighted_gram(vectors: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
    """``S = vectors diag(weights) vectors^T`` ([r, r], symmetrised)."""
    S = tf.linalg.matmul(vectors * weights[None, :], vectors, transpose_b=True)
    return 0.5 * (S + tf.transpose(S))


def _dual_terms(vectors: tf.Tensor, weights: tf.Tensor, objective: str, S: Optional[tf.Tensor] = None):
    """Eigen-decomposition of ``S = vectors diag(weights) vectors^T`` and the leverages ``q``; ``S``
    may be given (formed from the weighted columns alone, when the others carry no weight)."""
    if S is None:
        S = _weighted_gram(vectors, weights)
    w, V = tf.linalg.eigh(S)  # w: [r], V: [r, r]
    w = tf.maximum(w, tf.reduce_max(w) * 1e-300 + 1e-300)
    P = tf.linalg.matmul(V, vectors, transpose_a=True)  # [r, n]
    q = tf.reduce_sum(P * P * inverse_scale(w, objective)[:, None], axis=0)  # [n]
    return w, V, P, q


def inverse_scale(w, objective: str):
    """The eigenvalues of ``M(l)^{-1}`` from those ``w`` of ``S``: ``1 / w`` (entropy) or ``w^{-1/2}`` (mse),
    so that the leverages are ``q_i = sum_a inverse_scale_a (V^T v_i)_a^2``."""
    return 1.0 / w if objective == "entropy" else 1.0 / tf.sqrt(w)


def _dual_value(vectors: tf.Tensor, weights: tf.Tensor, objective: str) -> tf.Tensor:
    """The dual objective to minimise: ``sum(l) - log det S`` or ``sum(l) - 2 tr S^{1/2}``.

    ``+inf`` where ``S`` is singular or the weights are not finite (so line searches back off).
    """

    def value():
        w = tf.linalg.eigvalsh(_weighted_gram(vectors, weights))
        bad = tf.reduce_min(w) <= 0.0
        w_safe = tf.where(w > 0.0, w, tf.ones_like(w))
        if objective == "entropy":
            v = tf.reduce_sum(weights) - tf.reduce_sum(tf.math.log(w_safe))
        else:
            v = tf.reduce_sum(weights) - 2.0 * tf.reduce_sum(tf.sqrt(w_safe))
        return tf.where(bad, tf.constant(np.inf, tf.float64), v)

    finite = tf.logical_and(tf.reduce_all(tf.math.is_finite(weights)), tf.reduce_all(weights >= 0.0))
    return tf.cond(finite, value, lambda: tf.constant(np.inf, tf.float64))


def _dual_state(vectors: tf.Tensor, weights: tf.Tensor, objective: str):
    """One eigen-decomposition of ``S`` giving the dual value, its gradient ``1 - q`` (closed form:
    no backpropagation through the eigen-decomposition) and the terms of :func:`_dual_terms`.

    For interior weights (all positive, ``S`` non-singular) only: the Newton iterations keep them there.
    """
    w, V, P, q = _dual_terms(vectors, weights, objective)
    if objective == "entropy":
        value = tf.reduce_sum(weights) - tf.reduce_sum(tf.math.log(w))
    else:
        value = tf.reduce_sum(weights) - 2.0 * tf.reduce_sum(tf.sqrt(w))
    return value, 1.0 - q, w, V, P, q


def _mse_curvature(w: tf.Tensor) -> tf.Tensor:
    """``E_ab = 1 / (sqrt(w_a) sqrt(w_b) (sqrt(w_a) + sqrt(w_b)))``: divided differences of ``w^{-1/2}``."""
    sig = tf.sqrt(w)
    return 1.0 / (sig[:, None] * sig[None, :] * (sig[:, None] + sig[None, :]))  # [r, r]


def _dual_hessian(w: tf.Tensor, P: tf.Tensor, objective: str) -> tf.Tensor:
    """Hessian of the dual in the weights, from the eigen-decomposition of ``S``.

    entropy: ``Q o Q`` with ``Q = P^T diag(1/w) P``; mse: ``sum_ab E_ab (p_a o p_b)(p_a o p_b)^T`` with
    ``E`` from :func:`_mse_curvature` (cost r^2 m^2: used only for small problems).
    """
    if objective == "entropy":
        Q = tf.linalg.matmul(P * (1.0 / w)[:, None], P, transpose_a=True)
        return Q * Q
    E = _mse_curvature(w)

    def one_row(a):
        pa = P[a]  # [m]
        inner = tf.linalg.matmul(P * E[a][:, None], P, transpose_a=True)  # [m, m]
        return (pa[:, None] * pa[None, :]) * inner

    r = tf.shape(P)[0]
    m = tf.shape(P)[1]
    H0 = tf.zeros(tf.stack([m, m]), dtype=P.dtype)
    _, H = tf.while_loop(
        lambda a, H: a < r,
        lambda a, H: (a + 1, H + one_row(a)),
        (tf.constant(0), H0),
        parallel_iterations=1,
    )
    return H


def _mse_hessian_vector(w: tf.Tensor, P: tf.Tensor, v: tf.Tensor) -> tf.Tensor:
    """Exact mse dual Hessian times ``v`` in O(r^2 m): ``(Hv)_j = p_j^T (E o (P diag(v) P^T)) p_j``."""
    G = tf.linalg.matmul(P * v[None, :], P, transpose_b=True)  # [r, r]
    return tf.reduce_sum(P * tf.linalg.matmul(_mse_curvature(w) * G, P), axis=0)


def _barrier_curvature(slack, weights):
    """The barrier's curvature ``s / l`` (primal-dual; ``mu / l^2`` where ``s = mu / l``), capped so that
    weights that have all but vanished cannot overflow it."""
    return tf.minimum(slack / weights, 1e150)


def _mse_newton_direction(w, P, gb, barrier):
    """Newton direction for the barrier mse dual by preconditioned conjugate gradients.

    Exact Hessian-vector products. The preconditioner is the rank-one-curvature approximation
    ``Qt o Qt + barrier`` with ``Qt = P^T diag(e) P``, ``e_a = (2 w_a^{3/2})^{-1/2}`` (exact on the
    diagonal of ``E``), factorised only on the block of points whose barrier curvature is below
    their own curvature (those near the support); on the others, which the barrier dominates, it
    is its diagonal. So the Cholesky is of the near-support block, not of the whole working set.
    ``barrier`` ([m]) is the barrier's curvature (:func:`_barrier_curvature`).
    """
    e = tf.math.rsqrt(2.0 * tf.pow(w, 1.5))
    Pe = P * tf.sqrt(e)[:, None]
    own = tf.square(tf.reduce_sum(Pe * Pe, axis=0))  # diagonal of Qt o Qt
    block = tf.where(barrier < PRECONDITIONER_BLOCK * own)[:, 0]
    Pb = tf.gather(Pe, block, axis=1)
    Qt = tf.linalg.matmul(Pb, Pb, transpose_a=True)
    pre = Qt * Qt + tf.linalg.diag(tf.gather(barrier, block))
    pre = pre + 1e-13 * tf.reduce_max(own) * tf.eye(tf.shape(pre)[0], dtype=pre.dtype)
    Lp = tf.linalg.cholesky(pre)
    diagonal = 1.0 / (own + barrier)
    rows = tf.cast(block, tf.int32)[:, None]

    def precondition(v):
        inside = tf.linalg.cholesky_solve(Lp, tf.gather(v, block)[:, None])[:, 0]
        return tf.tensor_scatter_nd_update(v * diagonal, rows, inside)

    def apply(v):
        return _mse_hessian_vector(w, P, v) + barrier * v

    b = -gb
    x = precondition(b)
    res = b - apply(x)
    z = precondition(res)
    p = z
    rz = tf.reduce_sum(res * z)
    bnorm = tf.norm(b)

    def cond(k, x, res, z, p, rz):
        return tf.logical_and(k < 50, tf.norm(res) > CG_RTOL * bnorm)

    def body(k, x, res, z, p, rz):
        Ap = apply(p)
        alpha = rz / tf.reduce_sum(p * Ap)
        x = x + alpha * p
        res = res - alpha * Ap
        z = precondition(res)
        rz_new = tf.reduce_sum(res * z)
        p = z + (rz_new / rz) * p
        return k + 1, x, res, z, p, rz_new

    _, x, _, _, _, _ = tf.while_loop(cond, body, (tf.constant(0), x, res, z, p, rz))
    return x


#: Above this many r^2 m^2 flops the mse Newton direction is computed by preconditioned CG (the
#: dense Hessian is built row by row, r products of size m x r x m: slower than a few CG steps).
DENSE_MSE_HESSIAN_FLOPS = 1e8


def _certificate_terms(vectors: tf.Tensor, weights: tf.Tensor, objective: str):
    """Duality gap of the rescaled feasible covariance, its relative form, max q, and q."""
    w, _, _, q = _dual_terms(vectors, weights, objective)
    gap, rel, qmax = _gap(w, q, weights, objective)
    return gap, rel, qmax, q


def _gap(w: tf.Tensor, q: tf.Tensor, weights: tf.Tensor, objective: str):
    """Duality gap, relative gap and max q from the eigenvalues ``w`` of ``S`` and the leverages ``q``.

    entropy: ``r log(1 + eps)`` with the design gap ``eps = max q * sum(l) / r - 1``; mse:
    ``eps * tr^2 / sum(l)`` with ``eps = max q * sum(l) / tr - 1``, ``tr = tr S^{1/2}`` (relative gap eps).
    """
    r = tf.cast(tf.shape(w)[0], tf.float64)
    total = tf.reduce_sum(weights)
    qmax = tf.reduce_max(q)
    if objective == "entropy":
        eps = qmax * total / r - 1.0
        gap = r * tf.math.log1p(tf.maximum(eps, -0.5))
        rel = gap / r
    else:
        trace = tf.reduce_sum(tf.sqrt(w))
        eps = qmax * total / trace - 1.0
        gap = eps * trace * trace / total
        rel = eps
    return gap, rel, qmax


def _feasible_covariance_impl(vectors, weights, objective_is_entropy: bool):
    """Eigenvectors and scales of the feasible covariance ``M = M(l) * max q``, the gap, relative gap.

    ``M(l) = S`` (entropy) or ``S^{1/2}`` (mse); rescaled so that ``max_i v_i^T M^{-1} v_i = 1``.
    """
    objective = "entropy" if objective_is_entropy else "mse"
    w, V, _, q = _dual_terms(vectors, weights, objective)
    gap, rel, qmax = _gap(w, q, weights, objective)
    scales = tf.sqrt(w * qmax) if objective_is_entropy else tf.sqrt(tf.sqrt(w) * qmax)
    return V, scales, gap, rel


def _barrier_newton_impl(vectors, weights0, tol, max_iter, primal_dual, objective):
    """Log-barrier Newton on the dual from ``weights0`` (positive): ``(weights, steps, met)``.

    Both variants take the Newton step of the barrier problem ``dual - mu sum(log l)`` with the
    barrier's curvature ``s / l`` and an Armijo line search on it, and stop once the certificate
    (:func:`_gap`) meets ``tol``. ``primal_dual=False``: ``s = mu / l`` (the primal barrier), and ``mu``
    falls once the iterate is centred. ``primal_dual=True``: a slack ``s`` takes its own Newton step
    on ``l_i s_i = mu`` (so weights that must shrink tenfold do not cut every step to a tenth), and
    ``mu`` is :data:`PRIMAL_DUAL_SIGMA` of the mean ``l_i s_i`` after every step: fewer steps from a
    cold start, but slower than the primal barrier when new points have just been added at a guessed
    weight (docs/mechanisms.md#noise-optimiser).
    """
    dtype = tf.float64
    m = tf.cast(tf.shape(vectors)[1], dtype)
    gap0, _, _, _ = _certificate_terms(vectors, weights0, objective)
    mu0 = tf.maximum(gap0, 1e-3) / (m * MU_START_DIV)
    inf = tf.constant(np.inf, dtype)

    def cond(it, weights, slack, mu, done, met):
        return tf.logical_and(it < max_iter, tf.logical_not(done))

    def body(it, weights, slack, mu, done, met):
        value, grad, w, V, P, q = _dual_state(vectors, weights, objective)
        # The certificate bounds the excess of any weights, centred or not: stop once it is met.
        gap, rel, _ = _gap(w, q, weights, objective)
        converged = rel <= tol
        gb = grad - mu / weights
        slack = tf.where(primal_dual, slack, mu / weights)
        barrier = _barrier_curvature(slack, weights)

        def dense_direction():
            H = _dual_hessian(w, P, objective)
            Hb = H + tf.linalg.diag(barrier)
            # Jitter relative to the dual's own curvature, not the barrier's (which explodes on
            # inactive points and would swamp the Newton system).
            jitter = 1e-13 * tf.reduce_max(tf.linalg.diag_part(H))
            Hb = Hb + jitter * tf.eye(tf.shape(Hb)[0], dtype=dtype)
            return -tf.linalg.cholesky_solve(tf.linalg.cholesky(Hb), gb[:, None])[:, 0]

        if objective == "entropy":
            step = dense_direction()
        else:
            r_dim = tf.cast(tf.shape(P)[0], dtype)
            use_cg = r_dim * r_dim * m * m > DENSE_MSE_HESSIAN_FLOPS
            step = tf.cond(use_cg, lambda: _mse_newton_direction(w, P, gb, barrier), dense_direction)
        slack_step = mu / weights - slack - barrier * step  # Newton on l_i s_i = mu (primal-dual only)
        decrement2 = -tf.reduce_sum(gb * step)
        # Fraction to the boundary: keep every weight (and slack) strictly positive.
        t_max = tf.minimum(tf.constant(1.0, dtype),
                           0.99 * tf.reduce_min(tf.where(step < 0.0, -weights / step, tf.fill(tf.shape(step), inf))))
        t_slack = tf.minimum(tf.constant(1.0, dtype), 0.99 * tf.reduce_min(
            tf.where(slack_step < 0.0, -slack / slack_step, tf.fill(tf.shape(step), inf))))
        phi0 = value - mu * tf.reduce_sum(tf.math.log(weights))

        def ls_cond(t, k):
            trial = weights + t * step
            phi = _dual_value(vectors, trial, objective) - mu * tf.reduce_sum(tf.math.log(trial))
            return tf.logical_and(k < 60, tf.logical_not(phi <= phi0 - 0.25 * t * decrement2))

        t, k = tf.while_loop(ls_cond, lambda t, k: (0.5 * t, k + 1), (t_max, tf.constant(0)))
        # A failed line search means rounding error dominates the predicted decrease: stop there
        # (the certificate then reports honestly how close we got).
        failed = tf.logical_or(k >= 60, tf.logical_not(tf.reduce_all(tf.math.is_finite(step))))
        stalled = tf.logical_or(failed, tf.reduce_max(tf.abs(t * step)) <= 1e-13 * tf.reduce_max(weights))
        stay = tf.logical_or(failed, converged)
        new_weights = tf.where(stay, weights, weights + t * step)
        new_slack = tf.where(stay, slack, slack + t_slack * slack_step)
        # Primal barrier: decrease mu once (roughly) centred: at the central point the gap is about m mu.
        centred = decrement2 < CENTRED_DECREMENT
        barrier_mu = tf.where(centred, tf.minimum(mu * MU_FACTOR, gap / (MU_GAP_DIV * m)), mu)
        pd_mu = PRIMAL_DUAL_SIGMA * tf.reduce_sum(new_weights * new_slack) / m
        new_mu = tf.maximum(tf.where(primal_dual, pd_mu, barrier_mu), 1e-300)
        return it + 1, new_weights, new_slack, new_mu, tf.logical_or(converged, stalled), converged

    it, weights, _, _, _, met = tf.while_loop(
        cond, body, (tf.constant(0), weights0, mu0 / weights0, mu0, tf.constant(False), tf.constant(False)),
        parallel_iterations=1)
    return weights, it, met


#: Sensitivity vectors whose coordinates agree to this (relative to the largest entry of each
#: coordinate, so that rounding amplified in weak directions is absorbed) are merged.
DUPLICATE_RTOL = 1e-8
#: Most working-set rounds of one solve.
MAX_ROUNDS = 50
#: After the loose stage, points whose leverage exceeds this stay in the working set (lower keeps more:
#: points near active at the loose optimum tend to be active at the tight one, and re-adding them costs rounds).
PRUNE_LEVERAGE = 0.5

#: Each round adds r violators, spread (:func:`spread_violators`) among this many times r of the most
#: violated: the top r alone are near-copies of one another where the optimum's support is wide
#: (thousands of near-active points at r = 200), and need one round per region.
VIOLATOR_CANDIDATES = 10
#: ... stopping once every remaining candidate lies within this (whitened) distance of the span of
#: those picked: a violator's whitened vector has norm sqrt(q_i) > 1, so a smaller residual is mostly
#: a direction already added (and below about 1e-8 the choice would be rounding noise).
SPREAD_RESIDUAL = 0.3

MATRIX_SPEC = tf.TensorSpec([None, None], tf.float64)
VECTOR_SPEC = tf.TensorSpec([None], tf.float64)
REAL_SPEC = tf.TensorSpec([], tf.float64)
COUNT_SPEC = tf.TensorSpec([], tf.int32)


#: Seed of the fixed odd multipliers of the duplicate keys' 64-bit hash (a public constant).
HASH_SEED = 20181


def column_hashes(vectors: tf.Tensor, rowmax: tf.Tensor, rtol: tf.Tensor) -> tf.Tensor:
    """64-bit hashes ([n], uint64) of the columns' duplicate keys: coordinates rounded to ``rtol`` times
    each coordinate's largest entry ``rowmax`` ([r]). A multilinear hash with fixed odd multipliers,
    in modular (unsigned) arithmetic, so equal keys hash equally in any summation order or chunking.
    Graph-safe. Public: the vectors only."""
    keys = tf.round(vectors / (rowmax[:, None] * rtol)) + 0.0  # + 0.0 turns -0.0 into 0.0
    bits = tf.bitcast(tf.cast(keys, tf.int64), tf.uint64)  # [r, n]
    odd = tf.bitwise.bitwise_or(tf.random.stateless_uniform(
        tf.shape(vectors)[:1], seed=[HASH_SEED, 0], minval=None, maxval=None, dtype=tf.uint64), tf.constant(1, tf.uint64))
    h = tf.reduce_sum(bits * odd[:, None], axis=0)
    return tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, tf.constant(29, tf.uint64)))


def _distinct_columns_impl(vectors: tf.Tensor, rtol: tf.Tensor) -> tf.Tensor:
    scale = tf.reduce_max(tf.abs(vectors), axis=1)  # [r]
    n = tf.shape(vectors)[1]
    usable = tf.logical_and(tf.reduce_all(tf.math.is_finite(scale)), tf.reduce_all(scale > 0.0))

    def merged():
        _, group = tf.unique(column_hashes(vectors, scale, rtol), out_idx=tf.int32)
        first = tf.math.unsorted_segment_min(tf.range(n), group, tf.reduce_max(group) + 1)
        return tf.sort(first)

    return tf.cond(usable, merged, lambda: tf.range(n))


@tf.function(input_signature=[MATRIX_SPEC, REAL_SPEC], autograph=False)
def _distinct_columns(vectors: tf.Tensor, rtol: tf.Tensor) -> tf.Tensor:
    """Indices (sorted, [n']) of one representative of each group of numerically identical columns
    (coordinates equal after rounding to ``rtol`` times each coordinate's largest entry; found by
    :func:`column_hashes`: a collision merges columns that differ, which the certificate over all
    columns catches)."""
    return _distinct_columns_impl(vectors, rtol)


def _best_uniform_weight(vectors: tf.Tensor, objective: str) -> tf.Tensor:
    """The cold start: the dual's minimiser over equal weights ``c`` on the columns of ``vectors`` (r x m),
    ``c = r / m`` (entropy) or ``(tr G^{1/2} / m)^2`` (mse), ``G = vectors vectors^T``."""
    r = tf.cast(tf.shape(vectors)[0], tf.float64)
    m = tf.cast(tf.shape(vectors)[1], tf.float64)
    if objective == "entropy":
        return r / m
    G = _weighted_gram(vectors, tf.ones_like(vectors[0]))
    root_trace = tf.reduce_sum(tf.sqrt(tf.maximum(tf.linalg.eigvalsh(G), 0.0)))
    c = (root_trace / m) ** 2
    return tf.where(tf.logical_and(tf.math.is_finite(c), c > 0.0), c, r / m)


def _indicator(indices: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
    """Boolean of the shape of ``like`` ([n]), True at ``indices``."""
    indices = tf.cast(indices, tf.int32)
    return tf.tensor_scatter_nd_update(tf.zeros_like(like, dtype=tf.bool), indices[:, None],
                                       tf.ones_like(indices, dtype=tf.bool))


#: Column-pivoted Gram-Schmidt on a wide matrix works in blocks of this many times ``count`` candidates.
PIVOT_CANDIDATES = 10


def _pivot_columns(vectors: tf.Tensor, count: tf.Tensor):
    """``count`` column indices chosen by column-pivoted Gram-Schmidt (Businger & Golub): each the
    column with the largest residual after projecting out those chosen before, so that together
    they span the leading directions of ``vectors``; and each pick's residual norm (non-increasing).

    Blocked, so that a wide matrix is read once per block rather than rewritten per pick: a block
    takes the ``PIVOT_CANDIDATES * count`` columns of largest residual norm (all columns when there
    are no more), pivots among them on their exact residuals, and keeps picking while the pick's
    residual is at least every other column's: the pick the unblocked method would make. The other
    columns' residual norms are then downdated by one product with the block's new directions.
    O(count r n) at worst, matrix products only.
    """
    r, n = tf.shape(vectors)[0], tf.shape(vectors)[1]
    T = tf.minimum(PIVOT_CANDIDATES * tf.maximum(count, 1), n)
    norms0 = tf.reduce_sum(vectors * vectors, axis=0)  # [n]
    slack = 1e-12 * tf.reduce_max(norms0)  # the downdated norms' rounding
    taken = tf.constant(-np.inf, vectors.dtype)

    def block(j, norms, Qt, picks, sizes):
        def largest():
            top = tf.math.top_k(norms, k=T + 1)  # T < n here
            return top.indices[:T], top.values[-1] + slack

        cand, bound = tf.cond(T < n, largest, lambda: (tf.range(n), taken))
        Vc = tf.gather(vectors, cand, axis=1)  # [r, T]
        Rc = Vc - tf.linalg.matmul(Qt, tf.linalg.matmul(Qt, Vc), transpose_a=True)
        Rc = Rc - tf.linalg.matmul(Qt, tf.linalg.matmul(Qt, Rc), transpose_a=True)  # twice is enough
        j0 = j

        def pick(i, j, Rc, Qt, picks, sizes, _):
            cn = tf.reduce_sum(Rc * Rc, axis=0)  # [T]
            a = tf.argmax(cn, output_type=tf.int32)
            col = Rc[:, a]
            size = tf.norm(col)
            q = col / tf.maximum(size, 1e-300)
            Rc = Rc - q[:, None] * tf.linalg.matvec(Rc, q, transpose_a=True)[None, :]
            more = tf.reduce_max(tf.reduce_sum(Rc * Rc, axis=0)) >= bound
            return (i + 1, j + 1, Rc, tf.tensor_scatter_nd_update(Qt, [[j]], q[None, :]),
                    tf.tensor_scatter_nd_update(picks, [[j]], [cand[a]]),
                    tf.tensor_scatter_nd_update(sizes, [[j]], [size]), more)

        _, j, _, Qt, picks, sizes, _ = tf.while_loop(
            lambda i, j, *rest: (j < count) & (i < T) & rest[-1], pick,
            (tf.constant(0), j, Rc, Qt, picks, sizes, tf.constant(True)))
        coeff = tf.linalg.matmul(Qt[j0:j], vectors)  # [b, n]: the new directions' components
        norms = norms - tf.reduce_sum(coeff * coeff, axis=0)
        norms = tf.tensor_scatter_nd_update(norms, picks[j0:j, None], tf.fill([j - j0], taken))
        return j, norms, Qt, picks, sizes

    _, _, _, picks, sizes = tf.while_loop(
        lambda j, *_: j < count, block,
        (tf.constant(0), norms0, tf.zeros(tf.stack([count, r]), vectors.dtype), tf.zeros([count], tf.int32),
         tf.zeros([count], vectors.dtype)))
    return picks, sizes


_pivots = tf.function(_pivot_columns, input_signature=[MATRIX_SPEC, COUNT_SPEC], autograph=False)


@check_shapes("vectors: [r, n]", "return[0]: [count]", "return[1]: [count]")
def pivot_columns(vectors: tf.Tensor, count: int):
    """Indices of ``count`` columns of ``vectors`` chosen by column-pivoted Gram-Schmidt (the working
    set's spanning points) and each pick's residual norm; compiled. Public: the vectors only."""
    return _pivots(tf.convert_to_tensor(vectors, tf.float64), tf.constant(int(count), tf.int32))


def _spread_violators_impl(whitened: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
    count = tf.minimum(count, tf.shape(whitened)[1])
    picks, sizes = _pivot_columns(whitened, count)
    return tf.sort(tf.boolean_mask(picks, sizes >= SPREAD_RESIDUAL))


_spread = tf.function(_spread_violators_impl, input_signature=[MATRIX_SPEC, COUNT_SPEC], autograph=False)


@check_shapes("whitened: [r, c]", "return: [k]")
def spread_violators(whitened: tf.Tensor, count: int) -> tf.Tensor:
    """Positions (sorted) of at most ``count`` of ``c`` candidate violators to add to a working set,
    chosen by column-pivoted Gram-Schmidt (:func:`_pivot_columns`) on their *whitened* vectors
    ``diag(inverse_scale)^{1/2} V^T v_i`` (squared norms: the leverages ``q_i``): the most violated
    first, then the one furthest from the span of those picked, and so on, until every remaining
    candidate is within ``SPREAD_RESIDUAL`` of that span. Near-identical violators (neighbouring
    inputs) are not added together, so one round repairs many regions; the stop keeps the choice off
    rounding noise. Compiled. Public: vectors only.
    """
    return _spread(tf.convert_to_tensor(whitened, tf.float64), tf.constant(int(count), tf.int32))


def _initial_working_set(vectors: tf.Tensor, dense_points: tf.Tensor) -> tf.Tensor:
    """All points when at most ``dense_points``; otherwise the highest-leverage points plus r points
    that span all directions (:func:`_pivot_columns`), so that the restricted problem is well posed."""
    r, n = tf.shape(vectors)[0], tf.shape(vectors)[1]

    def screened():
        lev = _dual_terms(vectors, tf.ones_like(vectors[0]), "entropy")[3]  # [n]: v_i^T (V V^T)^{-1} v_i
        lev = tf.where(tf.math.is_finite(lev), lev, tf.zeros_like(lev))
        top = tf.math.top_k(lev, k=tf.minimum(tf.maximum(4 * r, 500), n)).indices
        return tf.logical_or(_indicator(top, lev), _indicator(_pivot_columns(vectors, r)[0], lev))

    return tf.cond(n <= dense_points, lambda: tf.ones_like(vectors[0], dtype=tf.bool), screened)


def _working_set_solve(vectors, initial, objective, tol, max_iter, dense_points):
    """Dual weights ([n]) for the columns of ``vectors`` and the number of Newton steps taken.

    All points are solved together when affordable; otherwise on working sets. Stage 1 solves loosely
    on many points; then the points that carry no weight and are far from active are pruned (the
    optimum's support is a few r points on scattered inputs, thousands for smooth kernels on dense
    ones) and stage 2 solves to ``tol``. Points outside the working set that violate their constraint
    are added back, up to r per round, spread among the most violated (:func:`spread_violators`).
    Rounds take primal-dual steps, except one that starts from violators just added at a guessed
    weight (:func:`_barrier_newton_impl`).
    ``initial`` ([n], non-negative; all zero for a cold start) warm-starts the weights. Pure TensorFlow: the
    working set is a boolean mask, the restricted problem is gathered from it in the graph.
    """
    r, n = tf.shape(vectors)[0], tf.shape(vectors)[1]
    rf = tf.cast(r, tf.float64)
    warm = tf.reduce_max(initial) > 0.0
    mask = tf.logical_or(_initial_working_set(vectors, dense_points), initial > 0.0)
    cold = _best_uniform_weight(tf.gather(vectors, tf.where(mask)[:, 0], axis=1), objective)
    start = tf.where(warm, tf.maximum(initial, 1e-6 * tf.reduce_max(initial)), tf.fill([n], cold))
    weights = tf.where(mask, start, tf.zeros_like(start))
    size = tf.reduce_sum(tf.cast(mask, tf.int32))
    stage_tol = tf.where(size > tf.maximum(3 * r, PRUNE_MIN_POINTS), tf.maximum(tol, PRUNE_TOL), tol)

    def body(rounds, weights, mask, stage_tol, total, done, fresh):
        work = tf.where(mask)[:, 0]
        m = tf.cast(tf.shape(work)[0], tf.float64)
        w_sub = tf.maximum(tf.gather(weights, work), 1e-12 * rf / m)
        columns = tf.gather(vectors, work, axis=1)
        w_sub, its, met = _barrier_newton_impl(columns, w_sub, stage_tol, tf.maximum(max_iter - total, 1), fresh,
                                               objective=objective)
        total = total + its
        weights = tf.tensor_scatter_nd_update(tf.zeros_like(weights), tf.cast(work, tf.int32)[:, None], w_sub)
        w, _, P, q = _dual_terms(vectors, weights, objective, _weighted_gram(columns, w_sub))
        _, rel, _ = _gap(w, q, weights, objective)
        # all points solved to tol: the restricted certificate is the full one
        finished = tf.reduce_all(mask) & (stage_tol <= tol) & met
        finished = finished | (rel <= tol) | (total >= max_iter)
        wmax = tf.reduce_max(weights)
        loose = stage_tol > tol
        heavy = _indicator(tf.math.top_k(weights, k=tf.minimum(2 * r, n)).indices, weights)
        keep = tf.where(loose, (mask & ((weights > 1e-3 * wmax) | (q > PRUNE_LEVERAGE))) | heavy,
                        mask & (weights > 1e-10 * wmax))
        worst = tf.math.top_k(tf.where(~keep & (q > 1.0), q, tf.zeros_like(q)),
                              k=tf.minimum(VIOLATOR_CANDIDATES * r, n))
        candidates = tf.boolean_mask(worst.indices, worst.values > 1.0)
        whitened = tf.gather(P, candidates, axis=1) * tf.sqrt(inverse_scale(w, objective))[:, None]
        violators = _indicator(tf.gather(candidates, _spread_violators_impl(whitened, r)), weights)
        same = ~tf.reduce_any(violators) & tf.reduce_all(tf.equal(keep, mask))  # keep solving the same set
        new_mask = tf.where(same, mask, keep | violators)
        added = violators & ~same
        new_weights = tf.where(added, 1e-3 * wmax, weights)
        return (rounds + 1, tf.where(finished, weights, new_weights), tf.where(finished, mask, new_mask),
                tf.where(loose, tol, stage_tol), total, finished, ~tf.reduce_any(added))

    # primal-dual steps unless the round starts from violators just added at a guessed weight
    _, weights, _, _, total, _, _ = tf.while_loop(
        lambda rounds, *rest: (rounds < MAX_ROUNDS) & ~rest[-2], body,
        (tf.constant(0), weights, mask, stage_tol, tf.constant(0), tf.constant(False), tf.constant(True)))
    return weights, total


@check_shapes("vectors: [r, n]", "initial: [n]")
def optimise_tensors(vectors, initial, tol, max_iter, dense_points, duplicate_rtol, objective):
    """:func:`optimise_noise_covariance` on tensors: eigenvectors, scales, weights, gap, relative gap,
    Newton steps, support. Identical sensitivity vectors (repeated training inputs) carry identical
    constraints: the solve is over one representative of each, and the certificate over all vectors
    (so the merge is safe even where it is only approximate); if the merge was too coarse for ``tol``,
    all vectors are solved again."""
    n = tf.shape(vectors)[1]
    entropy = objective == "entropy"
    distinct = _distinct_columns_impl(vectors, duplicate_rtol)
    sub_weights, iters = _working_set_solve(tf.gather(vectors, distinct, axis=1), tf.gather(initial, distinct),
                                            objective, tol, max_iter, dense_points)
    weights = tf.tensor_scatter_nd_update(tf.zeros_like(initial), distinct[:, None], sub_weights)
    V, scales, gap, rel = _feasible_covariance_impl(vectors, weights, entropy)

    def all_vectors():
        more_weights, more = _working_set_solve(vectors, tf.zeros_like(initial), objective, tol,
                                                max_iter - iters, dense_points)
        return (more_weights, iters + more) + tuple(_feasible_covariance_impl(vectors, more_weights, entropy))

    refit = (rel > tol) & (tf.shape(distinct)[0] < n) & (iters < max_iter)
    weights, iters, V, scales, gap, rel = tf.cond(refit, all_vectors, lambda: (weights, iters, V, scales, gap, rel))
    support = tf.reduce_sum(tf.cast(weights > 1e-8 * tf.reduce_max(weights), tf.int32))
    return V, scales, weights, gap, rel, iters, support


def compile_per_objective(impl, input_signature) -> dict:
    """``{objective: tf.function(impl(*args, objective=objective))}`` for every objective, each with the
    given ``input_signature`` (dimensions left unknown: any shapes, no retracing)."""

    def compiled(objective: str):
        return tf.function(lambda *args: impl(*args, objective=objective), autograph=False,
                           input_signature=input_signature)

    return {objective: compiled(objective) for objective in OBJECTIVES}


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
    if not (isinstance(tol, (int, float)) and tol > 0.0):
        raise ValueError(f"tol must be > 0, got {tol!r}")
    if not (isinstance(max_iter, int) and max_iter >= 1):
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    vectors = tf.convert_to_tensor(vectors, dtype=tf.float64)
    r, n = int(vectors.shape[0]), int(vectors.shape[1])
    if r == 0 or n == 0:
        raise ValueError(f"need at least one sensitivity vector of positive dimension, got shape {(r, n)}")
    initial = np.zeros(n)
    if initial_weights is not None:
        initial = np.asarray(initial_weights, dtype=np.float64).reshape(-1)
        if initial.shape != (n,) or not np.all(np.isfinite(initial)) or np.any(initial < 0.0) or initial.max() <= 0.0:
            raise ValueError(f"initial_weights must be {n} finite non-negative numbers, not all zero")
    V, scales, weights, gap, rel, iters, support = OPTIMISERS[objective](
        vectors, tf.constant(initial), tf.constant(float(tol), tf.float64), tf.constant(int(max_iter), tf.int32),
        tf.constant(int(DENSE_POINTS), tf.int32), tf.constant(float(DUPLICATE_RTOL), tf.float64))
    return NoiseCovariance(V, scales, weights, certificate_of(objective, gap, rel, tol, iters, support))


def certificate_of(objective: str, gap, relative_gap, tol: float, iterations, support) -> OptimiserCertificate:
    """The :class:`OptimiserCertificate` of a compiled solve's outputs (host values)."""
    return OptimiserCertificate(objective=objective, gap=float(gap), relative_gap=float(relative_gap), tol=float(tol),
                                iterations=int(iterations), converged=bool(float(relative_gap) <= tol),
                                support=int(support))


@check_shapes("factor: [r, r]", "vectors: [r, n]")
def mahalanobis_sensitivity(factor: tf.Tensor, vectors: tf.Tensor, data_sensitivity: float) -> float:
    """``d * sqrt(max_i v_i^T (F F^T)^{-1} v_i)``: the sensitivity of ``v = vectors y`` against noise
    with covariance ``F F^T``, for outputs that move by at most ``d`` (the square root included).

    This is the privacy-critical number: it is computed from the factor actually used to draw noise.
    """
    qmax = float(max_mahalanobis_norm2(tf.convert_to_tensor(factor, tf.float64), tf.convert_to_tensor(vectors, tf.float64)))
    if not math.isfinite(qmax):
        raise FloatingPointError("the sensitivity is not finite: the noise covariance is singular")
    return float(data_sensitivity) * math.sqrt(qmax)


@check_shapes("factor: [r, r]", "vectors: [r, n]", "return[0]: [r, n]", "return[1]: []")
def mahalanobis_terms(factor: tf.Tensor, vectors: tf.Tensor):
    """``z = F^{-1} v`` ([r, n], an LU solve with the factor itself) and ``max_i ||z_i||^2``: the one
    formula of the sensitivity."""
    z = linalg.solve(factor, vectors)  # [r, n]
    return z, tf.reduce_max(tf.reduce_sum(z * z, axis=0))


@check_shapes("factor: [r, r]", "vectors: [r, n]", "return: []")
def max_mahalanobis_norm2(factor: tf.Tensor, vectors: tf.Tensor) -> tf.Tensor:
    """``max_i ||F^{-1} v_i||^2`` (:func:`mahalanobis_terms`)."""
    return mahalanobis_terms(factor, vectors)[1]


#: Entries of ``C`` formed at a time by the row-wise functions below (bounds memory for factored or large ``C``).
BLOCK_ENTRIES = 2**24


def _row_blocks(C) -> Iterator[tuple]:
    """``(start, rows)`` blocks of dense rows of ``C`` or of a factored ``(A, B)``, about
    ``BLOCK_ENTRIES`` entries each."""
    if isinstance(C, (tuple, list)):
        A, B = (tf.convert_to_tensor(x, dtype=tf.float64) for x in C)
        k, n = int(A.shape[0]), int(B.shape[1])
        rows = lambda i, j: tf.linalg.matmul(A[i:j], B)  # noqa: E731
    else:
        C = tf.convert_to_tensor(C, dtype=tf.float64)
        k, n = (int(x) for x in C.shape)
        rows = lambda i, j: C[i:j]  # noqa: E731
    step = max(1, BLOCK_ENTRIES // max(n, 1))
    for i in range(0, k, step):
        yield i, rows(i, i + step)


def noise_std_lower_bound(C, data_sensitivity: float, noise_multiplier: float) -> np.ndarray:
    """``s d max_i |C_ji|`` per prediction j: no Gaussian noise, of any covariance, can be smaller.

    A release ``C y + N(0, Sigma)`` whose outputs move by up to ``d`` is (epsilon, delta)-DP with the
    analytic multiplier ``s`` only if ``s^2 d^2 c_i^T Sigma^{-1} c_i <= 1`` for every column ``c_i``
    (the privacy loss of a Gaussian shift depends on its Mahalanobis norm alone; for a singular
    ``Sigma`` read its pseudo-inverse, and ``c_i`` must lie in its range), and Cauchy-Schwarz,
    ``C_ji^2 <= Sigma_jj c_i^T Sigma^{-1} c_i``, then gives ``Sigma_jj >= s^2 d^2 C_ji^2``. Optimal
    for a single prediction (k = 1); a yardstick for the optimiser and for utility targets otherwise.

    ``C`` is the k x n cloaking matrix or a factored pair ``(A, B)`` (formed a block of rows at a
    time). Public: depends on ``C`` (public inputs and hyperparameters) only.
    """
    d, s = float(data_sensitivity), float(noise_multiplier)
    if not (math.isfinite(d) and d > 0.0 and math.isfinite(s) and s > 0.0):
        raise ValueError(f"data_sensitivity and noise_multiplier must be finite and > 0, got {d!r}, {s!r}")
    largest = tf.concat([tf.reduce_max(tf.abs(rows), axis=1) for _, rows in _row_blocks(C)], axis=0)
    return s * d * largest.numpy()


def projection_rows(C, space: ColumnSpace) -> tuple:
    """Per prediction j: ``||C_j - P_j||_1`` and ``max_i |P_ji|``, with ``P = basis vectors`` the
    projection of ``C`` onto ``space`` (what a release of that space publishes).

    Projecting moves the j-th prediction of ``C y`` by at most ``b ||C_j - P_j||_1`` when every
    ``|y_i| <= b``, attained at ``y = b sign(C_j - P_j)``: the exact worst case, per prediction.
    ``s d max_i |P_ji|`` is :func:`noise_std_lower_bound` of the projected release. ``C`` is dense
    or a factored ``(A, B)``; nothing k x n is held at once. Public: ``C`` only.
    """
    l1, largest = [], []
    for start, rows in _row_blocks(C):
        block = _projection_block(rows, space.basis[start:start + int(rows.shape[0])], space.vectors)
        l1.append(block[0])
        largest.append(block[1])
    return tf.concat(l1, axis=0).numpy(), tf.concat(largest, axis=0).numpy()


@check_shapes("rows: [k, n]", "basis_rows: [k, r]", "vectors: [r, n]")
def projection_terms(rows: tf.Tensor, basis_rows: tf.Tensor, vectors: tf.Tensor):
    """``||C_j - P_j||_1`` and ``max_i |P_ji|`` for the rows ``C_j`` given (see :func:`projection_rows`)."""
    projected = tf.linalg.matmul(basis_rows, vectors)
    return tf.reduce_sum(tf.abs(rows - projected), axis=1), tf.reduce_max(tf.abs(projected), axis=1)


_projection_block = tf.function(projection_terms, input_signature=[MATRIX_SPEC] * 3, autograph=False)


@check_shapes("F: [k, r]", "return: [k]")
def row_norms(F: tf.Tensor) -> tf.Tensor:
    """Euclidean norm of each row of ``F``, scaled so that tiny rows (a prediction far from all data)
    do not underflow to 0 where their noise is not 0."""
    scale = tf.reduce_max(tf.abs(F), axis=1, keepdims=True)  # [k, 1]
    safe = tf.where(scale > 0.0, scale, tf.ones_like(scale))
    return scale[:, 0] * tf.norm(F / safe, axis=1)


# -- public entry points for callers that hold only a working set of the columns (streaming, Dask) --


#: The restricted solve of one working-set round, compiled per objective (stable signatures).
RESTRICTED_SOLVERS = compile_per_objective(_barrier_newton_impl, [MATRIX_SPEC, VECTOR_SPEC, REAL_SPEC, COUNT_SPEC,
                                                                   tf.TensorSpec([], tf.bool)])


@check_shapes("vectors: [r, w]", "weights0: [w]")
def restricted_dual_solve(vectors: tf.Tensor, weights0: tf.Tensor, objective: str, tol: float, max_iter: int,
                          primal_dual: bool):
    """The working-set step of :func:`optimise_noise_covariance`: the compiled log-barrier Newton
    method on the columns ``vectors`` (r x w) from ``weights0`` (w, positive), primal-dual unless the
    round starts from violators just added (as the in-memory rounds choose). Returns
    ``(weights, steps, met)``. Lets a caller that streams the other columns (and certifies over all
    of them itself) run exactly the restricted solve the in-memory optimiser runs. Public: the
    sensitivity vectors only."""
    validate_objective(objective)
    return RESTRICTED_SOLVERS[objective](tf.convert_to_tensor(vectors, tf.float64),
                                         tf.convert_to_tensor(weights0, tf.float64),
                                         tf.constant(float(tol), tf.float64), tf.constant(int(max_iter), tf.int32),
                                         tf.constant(bool(primal_dual)))


@check_shapes("vectors: [r, w]")
def best_uniform_weight(vectors: tf.Tensor, objective: str) -> float:
    """The optimiser's cold start on the working set ``vectors`` (r x w): the dual's minimiser over equal
    weights (what :func:`optimise_noise_covariance` starts from). Public."""
    validate_objective(objective)
    return float(_best_uniform_weight(tf.convert_to_tensor(vectors, tf.float64), objective))
