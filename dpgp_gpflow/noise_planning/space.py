"""The column space of a cloaking matrix ``C`` and what projecting onto it costs (docs/mechanisms.md#cloaking).

``C`` (k x n) is factored as ``C ~ U_r beta``: ``U_r`` (k x r) orthonormal, ``beta = U_r^T C`` (r x n)
the exact sensitivity vectors of the projected release. :func:`singular_pairs` is the one rule for
the singular pairs of the in-memory and graph-mode releases; :func:`projection_rows` gives the
per-prediction worst-case bias of dropping the other directions, which the rank rule
(:mod:`.rank`) weighs against the noise. Privacy assumption: ``C`` is a function of public inputs
and hyperparameters only.
"""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple, Optional

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from ..neighbours import Neighbours, neighbour_columns
from ..sampling import UNIT_ROUNDOFF
from .dual import MATRIX_SPEC
from .rank import validate_rtol


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
        return int(self.basis.shape[1])  # the streamed release leaves ``vectors`` implicit (None)



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
    rtols = tuple(validate_rtol(t) for t in rtols)
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
#: Called eagerly (the in-memory release), a Gram matrix whose side exceeds this is decomposed by LAPACK's
#: divide and conquer (NumPy's ``eigh``) rather than TensorFlow's eigensolver, whose reduction is not
#: blocked: 1,000 x 1,000 about 0.23 s CPU against 0.52 s. In a graph TensorFlow's is used at every size.
LAPACK_EIGH_MIN = 256


def _gram_pairs(C: tf.Tensor, min_rtol: float):
    """Singular values (all, descending), left singular vectors (those above ``min_rtol s_1``, at
    least) and the rounding bound of :func:`singular_pairs`, from the eigendecomposition of the
    smaller of ``C C^T`` and ``C^T C``. Graph-safe."""
    k, n = tf.shape(C)[0], tf.shape(C)[1]
    eps = 2.0 * UNIT_ROUNDOFF  # machine epsilon

    lapack = tf.executing_eagerly() and min(int(C.shape[0]), int(C.shape[1])) > LAPACK_EIGH_MIN

    def eigen(G):
        G = 0.5 * (G + tf.transpose(G))
        if lapack:  # the same decomposition by a faster solver (both backward stable: the bound below holds)
            lam, vec = np.linalg.eigh(G.numpy())
            return tf.constant(lam[::-1].copy()), tf.constant(vec[:, ::-1].copy())
        lam, vec = tf.linalg.eigh(G)
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


#: Entries of ``C`` formed at a time by the row-wise functions below (bounds memory for factored or large ``C``).
BLOCK_ENTRIES = 2**24


def row_blocks(C) -> Iterator[tuple]:
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



def projection_rows(C, space: ColumnSpace, neighbours: Optional[Neighbours] = None) -> tuple:
    """Per prediction j: ``||C_j - P_j||_1`` and ``max_i |P_ji|``, with ``P = basis vectors`` the
    projection of ``C`` onto ``space`` (what a release of that space publishes); with ``neighbours``
    (persons, a map ``A``) the second is ``max_c |(P A)_jc|`` over the extreme changes, the bias
    is of ``C`` itself either way.

    Projecting moves the j-th prediction of ``C y`` by at most ``b ||C_j - P_j||_1`` when every
    ``|y_i| <= b``, attained at ``y = b sign(C_j - P_j)``: the exact worst case, per prediction.
    ``s d max_i |P_ji|`` is :func:`noise_std_lower_bound` of the projected release. ``C`` is dense
    or a factored ``(A, B)``; nothing k x n is held at once. Public: ``C`` only.
    """
    l1, largest = [], []
    columns = None if neighbours is None else neighbour_columns(space.vectors, neighbours)  # [r, N_c]
    for start, rows in row_blocks(C):
        basis_rows = space.basis[start:start + int(rows.shape[0])]
        block = _projection_block(rows, basis_rows, space.vectors) if columns is None else \
            _grouped_projection_block(rows, basis_rows, space.vectors, columns)
        l1.append(block[0])
        largest.append(block[1])
    return tf.concat(l1, axis=0).numpy(), tf.concat(largest, axis=0).numpy()


@check_shapes("rows: [k, n]", "basis_rows: [k, r]", "vectors: [r, n]", "columns: [r, c]")
def projection_terms(rows: tf.Tensor, basis_rows: tf.Tensor, vectors: tf.Tensor, columns: Optional[Any] = None):
    """``||C_j - P_j||_1`` and ``max_i |P_ji|`` for the rows ``C_j`` given (see :func:`projection_rows`);
    with ``columns = vectors A`` (persons' extreme changes) the second is ``max_c |(P A)_jc|``."""
    projected = tf.linalg.matmul(basis_rows, vectors)
    floor = projected if columns is None else tf.linalg.matmul(basis_rows, columns)
    return tf.reduce_sum(tf.abs(rows - projected), axis=1), tf.reduce_max(tf.abs(floor), axis=1)


_projection_block = tf.function(projection_terms, input_signature=[MATRIX_SPEC] * 3, autograph=False)
_grouped_projection_block = tf.function(projection_terms, input_signature=[MATRIX_SPEC] * 4, autograph=False)

