"""The noise optimiser's working-set loop and the choice of its columns (docs/mechanisms.md#noise-optimiser).

The dual has one weight per training point, but its solution is supported on few points: the
loop (:func:`solve_on_working_sets`) solves restricted problems (:mod:`.dual`) on a working set and
certifies over every column with one pass. The columns come from a :class:`ColumnProvider`: a dense
tensor here (:class:`DenseColumns`), chunks recomputed from public inputs in
:mod:`dpgp_gpflow.streaming.solver`. The loop and :func:`solve_noise` around it are written once,
for both. Privacy assumption: none; everything here is a function of the public sensitivity vectors.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Protocol, Tuple

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from .dual import (
    COUNT_SPEC,
    MATRIX_SPEC,
    REAL_SPEC,
    RESTRICTED_SOLVERS,
    SHARED_BODY,
    VECTOR_SPEC,
    barrier_newton_terms,
    compile_per_objective,
    uniform_weight,
    dual_terms,
    duality_gap,
    feasible_scales,
    inverse_scale,
)

#: Working-set solves are used when there are more training points than this.
DENSE_POINTS = 500
#: Relative gap of the first, loose stage before points far from the support are pruned. It runs only where
#: the cold start is every column (at most DENSE_POINTS of them) and more than max(3 r, PRUNE_MIN_POINTS):
#: 301 to 500 points at r < n / 3 (a start above DENSE_POINTS, max(r, START_POINTS) + r, never is).
PRUNE_TOL = 1e-2
#: Working sets up to this size are solved in one stage (pruning would not pay for a restart).
PRUNE_MIN_POINTS = 300
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


def distinct_columns(vectors: tf.Tensor, rtol: tf.Tensor) -> tf.Tensor:
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
    return distinct_columns(vectors, rtol)


def _indicator(indices: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
    """Boolean of the shape of ``like`` ([n]), True at ``indices``."""
    indices = tf.cast(indices, tf.int32)
    return tf.tensor_scatter_nd_update(tf.zeros_like(like, dtype=tf.bool), indices[:, None],
                                       tf.ones_like(indices, dtype=tf.bool))


#: Column-pivoted Gram-Schmidt on a wide matrix works in blocks of this many times ``count`` candidates.
PIVOT_BLOCK_FACTOR = 10
#: Within a block the candidates' residual norms are downdated after each pick (one read of the block per
#: pick, not a rewrite); one that falls below this fraction of its last exact value is recomputed (LAPACK's).
DOWNDATE_RTOL = float(np.sqrt(np.finfo(np.float64).eps))


def _pivot_columns(vectors: tf.Tensor, count: tf.Tensor, floor: Optional[float] = None):
    """``count`` column indices chosen by column-pivoted Gram-Schmidt (Businger & Golub): each the
    column with the largest residual after projecting out those chosen before, so that together
    they span the leading directions of ``vectors``; and each pick's residual norm (non-increasing).

    Blocked, so that a wide matrix is read once per block rather than rewritten per pick: a block
    takes the ``PIVOT_BLOCK_FACTOR * count`` columns of largest residual norm (all columns when there
    are no more), pivots among them on their exact residuals, and keeps picking while the pick's
    residual is at least every other column's: the pick the unblocked method would make. Within the block
    a pick's residual is formed exactly (against every direction picked) and the others' norms are
    downdated by its direction (recomputed when cancellation took most of their digits: LAPACK's rule);
    the other columns' residual norms are then downdated by one product with the block's new directions.
    O(count r n) at worst, matrix products only, each against the directions picked so far. ``floor`` (a float
    or a scalar tensor): stop after the first pick whose residual is below it (the later picks and sizes are
    then zero). A NaN or infinite entry of ``vectors`` raises (``InvalidArgumentError``, eager or in a graph):
    its residuals would order the picks silently (a NaN is never the largest, nor below any floor).
    """
    vectors = tf.debugging.assert_all_finite(vectors, "column pivoting needs finite vectors (a NaN or infinite "
                                             "entry would order the picks silently)")
    r, n = tf.shape(vectors)[0], tf.shape(vectors)[1]
    T = tf.minimum(PIVOT_BLOCK_FACTOR * tf.maximum(count, 1), n)
    norms0 = tf.reduce_sum(vectors * vectors, axis=0)  # [n]
    slack = 1e-12 * tf.reduce_max(norms0)  # the downdated norms' rounding
    taken = tf.constant(-np.inf, vectors.dtype)

    def block(j, norms, Qt, picks, sizes):
        def largest():
            top = tf.math.top_k(norms, k=T + 1)  # T < n here
            return top.indices[:T], top.values[-1] + slack

        cand, bound = tf.cond(T < n, largest, lambda: (tf.range(n), taken))
        Vc = tf.gather(vectors, cand, axis=1)  # [r, T]
        Q0 = Qt[:j]  # the directions picked so far (Qt's other rows are zero: not multiplied)
        Rc = Vc - tf.linalg.matmul(Q0, tf.linalg.matmul(Q0, Vc), transpose_a=True)
        Rc = Rc - tf.linalg.matmul(Q0, tf.linalg.matmul(Q0, Rc), transpose_a=True)  # twice is enough
        j0 = j

        def orthogonal(R, Qt):  # R less its components along the directions picked so far (twice is enough)
            R = R - tf.linalg.matmul(Qt, tf.linalg.matmul(Qt, R), transpose_a=True)
            return R - tf.linalg.matmul(Qt, tf.linalg.matmul(Qt, R), transpose_a=True)

        def exact_norms(Qt, cn, ref, lost):  # the lost candidates' residual norms recomputed
            where = tf.cast(tf.where(lost), tf.int32)
            fresh = tf.reduce_sum(tf.square(orthogonal(tf.gather(Rc, where[:, 0], axis=1), Qt)), axis=0)
            return tf.tensor_scatter_nd_update(cn, where, fresh), tf.tensor_scatter_nd_update(ref, where, fresh)

        def pick(i, j, cn, ref, Qt, picks, sizes, _):  # cn [T]: the candidates' squared residual norms
            a = tf.argmax(cn, output_type=tf.int32)
            col = orthogonal(Rc[:, a:a + 1], Qt[:j])[:, 0]  # the pick's residual, exact
            size = tf.norm(col)
            # a residual at rounding level is no new direction (Qt keeps orthonormal rows)
            q = tf.where(size > 1e-13 * tf.norm(Rc[:, a]), col / tf.maximum(size, 1e-300), tf.zeros_like(col))
            Qt = tf.tensor_scatter_nd_update(Qt, [[j]], q[None, :])
            coeff = tf.linalg.matvec(Rc, q, transpose_a=True)  # [T]: q is orthogonal to the earlier picks
            cn = tf.tensor_scatter_nd_update(cn - coeff * coeff, [[a]], [taken])
            # a downdated norm that lost most of its digits is recomputed from the residuals (as LAPACK's geqp3)
            lost = (cn > taken) & (cn < DOWNDATE_RTOL * ref)
            cn, ref = tf.cond(tf.reduce_any(lost) & (j + 1 < count), lambda: exact_norms(Qt[:j + 1], cn, ref, lost),
                              lambda: (cn, ref))
            return (i + 1, j + 1, cn, ref, Qt, tf.tensor_scatter_nd_update(picks, [[j]], [cand[a]]),
                    tf.tensor_scatter_nd_update(sizes, [[j]], [size]), tf.reduce_max(cn) >= bound)

        cn0 = tf.reduce_sum(Rc * Rc, axis=0)
        _, j, _, _, Qt, picks, sizes, _ = tf.while_loop(
            lambda i, j, *rest: (j < count) & (i < T) & rest[-1] & above_floor(j, rest[-2]), pick,
            (tf.constant(0), j, cn0, cn0, Qt, picks, sizes, tf.constant(True)))
        coeff = tf.linalg.matmul(Qt[j0:j], vectors)  # [b, n]: the new directions' components
        norms = norms - tf.reduce_sum(coeff * coeff, axis=0)
        norms = tf.tensor_scatter_nd_update(norms, picks[j0:j, None], tf.fill([j - j0], taken))
        return j, norms, Qt, picks, sizes

    def above_floor(j, sizes):  # no floor, or the last pick's residual still at least the floor
        if floor is None:
            return tf.constant(True)
        return tf.reduce_all(sizes[tf.maximum(j - 1, 0):j] >= floor)

    _, _, _, picks, sizes = tf.while_loop(
        lambda j, norms, Qt, picks, sizes: (j < count) & above_floor(j, sizes), block,
        (tf.constant(0), norms0, tf.zeros(tf.stack([count, r]), vectors.dtype), tf.zeros([count], tf.int32),
         tf.zeros([count], vectors.dtype)))
    return picks, sizes


_pivots = tf.function(_pivot_columns, input_signature=[MATRIX_SPEC, COUNT_SPEC], autograph=False)
#: :func:`_pivot_columns` with a ``floor`` tensor (``-inf``: none), one body for every graph that pivots (the
#: screened cold start and the spread of violators in each round); eager callers run the Python function.
_floored_pivots = tf.function(_pivot_columns, input_signature=[MATRIX_SPEC, COUNT_SPEC, REAL_SPEC], autograph=False,
                              experimental_attributes=SHARED_BODY)


def _pivots_of(vectors: tf.Tensor, count: tf.Tensor, floor: Optional[float] = None):
    """:func:`_pivot_columns` with the floor ``floor`` (None: ``-inf``, no pick stops at it, the residuals being
    finite: :func:`_pivot_columns` refuses vectors that are not), eager or, in a graph, as a call of the one
    compiled body: the same floor both ways."""
    floor = tf.constant(-np.inf if floor is None else floor, tf.float64)
    if tf.executing_eagerly():
        return _pivot_columns(vectors, count, floor)
    return _floored_pivots(vectors, count, floor)


@check_shapes("vectors: [r, n]", "return[0]: [count]", "return[1]: [count]")
def pivot_columns(vectors: tf.Tensor, count: int):
    """Indices of ``count`` columns of ``vectors`` chosen by column-pivoted Gram-Schmidt (the working
    set's spanning points) and each pick's residual norm; compiled. Public: the vectors only."""
    return _pivots(tf.convert_to_tensor(vectors, tf.float64), tf.constant(int(count), tf.int32))


def _spread_violators_impl(whitened: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
    count = tf.minimum(count, tf.shape(whitened)[1])
    picks, sizes = _pivots_of(whitened, count, SPREAD_RESIDUAL)  # the picks below it are not used
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




class WorkingSet(NamedTuple):
    """Columns of the dual's restricted problem: their indices ([w], int32, as the provider numbers
    them), the columns themselves ([r, w]) and their dual weights ([w]); every other column has weight 0."""

    indices: tf.Tensor
    columns: tf.Tensor
    weights: tf.Tensor


class Violators(NamedTuple):
    """One pass over every column for the weights of a working set (eigen-decomposition of ``S``)."""

    largest: tf.Tensor  #: [] ``max_i q_i`` over every column: the certificate's term
    indices: tf.Tensor  #: [c] int32: the most violated columns (``q_i > 1``) outside ``keep``, at most ``count``
    leverages: tf.Tensor  #: [c] their ``q_i``, largest first (ties: lower index first)
    columns: tf.Tensor  #: [r, c] their vectors


class ColumnProvider(Protocol):
    """The sensitivity vectors ``v_i`` (r-vectors, as columns) the working-set loop reads: a dense tensor
    (:class:`DenseColumns`), or chunks recomputed from public inputs
    (:class:`dpgp_gpflow.streaming.solver.StreamedColumns`, local or Dask). Everything is public."""

    def count(self) -> tf.Tensor:
        """The number of columns taking part ([], int32)."""

    def start(self, rank: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """The cold start's working set, indices ([w], int32) and columns ([r, w]): every column when there
        are at most ``DENSE_POINTS``; else the ``max(r, START_POINTS)`` of largest leverage under unit weights
        and ``r`` spanning ones chosen by column-pivoted Gram-Schmidt (:func:`pivot_columns`), so that
        the restricted problem is well posed."""

    def violators(self, eigenvectors: tf.Tensor, inverse_scales: tf.Tensor, keep: tf.Tensor,
                  count: tf.Tensor) -> Violators:
        """The leverages ``q_i = sum_a inverse_scales_a (eigenvectors^T v_i)_a^2`` of every column: their
        maximum, and the ``count`` largest above 1 among the columns not in ``keep`` (indices)."""


#: A cold start takes the ``max(r, START_POINTS)`` columns of largest leverage (and r spanning ones): the
#: optimum's support is typically a little over r points (211 at r = 170 in benchmarks/overhead.py's
#: 1000 x 200 case), and every column in the working set costs each Newton step O(r^2); the rounds
#: add the violators left out.
START_POINTS = 200


def start_size(rank: tf.Tensor, n: tf.Tensor) -> tf.Tensor:
    """How many columns of largest leverage a cold start takes: ``min(max(r, START_POINTS), n)``."""
    return tf.minimum(tf.maximum(rank, START_POINTS), n)


def _graph_or_eager(compiled: Callable, impl: Callable) -> Callable:
    """``compiled`` (a ``tf.function`` with :data:`~.dual.SHARED_BODY`) while tracing a graph, ``impl`` when
    called eagerly. In a graph the compiled function is one call op of a body traced (and instantiated)
    once per process, however many places of the graph (and graphs) call it: a release's first call
    traces and optimises each such body once, not once per call site (the same ops, the same numbers)."""
    return impl if tf.executing_eagerly() else compiled


def _screened_start_impl(vectors: tf.Tensor, rank: tf.Tensor) -> tf.Tensor:
    """:meth:`DenseColumns.start` above ``DENSE_POINTS`` columns: the positions ([w], sorted) of the
    ``start_size`` columns of largest leverage under unit weights and of ``rank`` spanning ones."""
    lev = dual_terms(vectors, tf.ones_like(vectors[0]), "entropy")[3]  # [n]: v_i^T (V V^T)^{-1} v_i
    lev = tf.where(tf.math.is_finite(lev), lev, tf.zeros_like(lev))
    top = tf.math.top_k(lev, k=start_size(rank, tf.shape(vectors)[1])).indices
    chosen = tf.logical_or(_indicator(top, lev), _indicator(_pivots_of(vectors, rank)[0], lev))
    return tf.cast(tf.where(chosen)[:, 0], tf.int32)


_screened_start = tf.function(_screened_start_impl, input_signature=[MATRIX_SPEC, COUNT_SPEC], autograph=False,
                              experimental_attributes=SHARED_BODY)


class DenseColumns:
    """The columns of an r x n tensor, or of those of its columns listed in ``members`` (sorted): the
    provider of the in-memory and compiled releases. Graph-safe."""

    def __init__(self, vectors: tf.Tensor, dense_points: tf.Tensor, members: Optional[tf.Tensor] = None) -> None:
        self.members = tf.range(tf.shape(vectors)[1]) if members is None else members
        self.vectors = vectors if members is None else tf.gather(vectors, members, axis=1)
        self.dense_points = dense_points

    @classmethod
    def held(cls, members: tf.Tensor, vectors: tf.Tensor, dense_points: tf.Tensor) -> "DenseColumns":
        """The provider of columns already gathered: ``vectors`` ([r, w]) are the columns ``members`` ([w])."""
        columns = cls.__new__(cls)
        columns.members, columns.vectors, columns.dense_points = members, vectors, dense_points
        return columns

    def count(self) -> tf.Tensor:
        return tf.shape(self.vectors)[1]

    def start(self, rank: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        vectors, n = self.vectors, self.count()
        screened = _graph_or_eager(_screened_start, _screened_start_impl)
        local = tf.cond(n <= self.dense_points, lambda: tf.range(n), lambda: screened(vectors, rank))
        return tf.gather(self.members, local), tf.gather(vectors, local, axis=1)

    def violators(self, eigenvectors, inverse_scales, keep, count) -> Violators:
        P = tf.linalg.matmul(eigenvectors, self.vectors, transpose_a=True)  # [r, n]
        q = tf.reduce_sum(P * P * inverse_scales[:, None], axis=0)
        outside = ~_indicator(tf.searchsorted(self.members, keep), q) & (q > 1.0)
        top = tf.math.top_k(tf.where(outside, q, tf.zeros_like(q)), k=tf.minimum(count, self.count()))
        violated = top.values > 1.0
        local = tf.boolean_mask(top.indices, violated)
        return Violators(tf.reduce_max(q), tf.gather(self.members, local), tf.boolean_mask(top.values, violated),
                         tf.gather(self.vectors, local, axis=1))


def _restricted_solver(objective: str) -> Callable:
    """The restricted solve ``(weights, steps, met, terms)``: inline in a graph, where ``terms`` is the
    :func:`~.dual.dual_terms` ``(w, V, P, q)`` at the weights returned (carried by the Newton loop); the
    compiled one when called eagerly (streaming), where ``terms`` is None (the caller decomposes)."""
    if tf.executing_eagerly():
        return lambda *args: (*RESTRICTED_SOLVERS[objective](*args), None)

    def inline(vectors, weights0, tol, max_iter, primal_dual):
        return barrier_newton_terms(vectors, weights0, tol, max_iter, primal_dual, objective=objective)

    return inline


def solve_on_working_sets(columns: ColumnProvider, start: WorkingSet, warm: tf.Tensor, objective: str,
                          tol: tf.Tensor, max_iter: tf.Tensor):
    """The working-set loop of the noise optimiser: the final working set (its weights are the solution),
    the Newton steps taken, ``max_i q_i`` over every column if the loop ended on a pass of that set's
    weights (else -1: also when ``MAX_ROUNDS`` cut it short after a pass that changed the set) and the
    :class:`Decomposition` of ``S`` at the final weights (valid unless the loop was cut short).

    Stage 1 solves loosely on many points (a cold ``start`` larger than ``max(3 r, PRUNE_MIN_POINTS)``);
    then the points that carry no weight and are far from active are pruned (the optimum's support is
    a few r points on scattered inputs, thousands for smooth kernels on dense ones) and stage 2 solves
    to ``tol``; a ``warm`` start is solved to ``tol`` from the first round. Columns outside the working
    set that violate their constraint are added back, up to r per round, spread among the most
    violated (:func:`spread_violators`). Rounds take primal-dual steps, except one that starts from
    violators just added at a guessed weight (:func:`.dual.barrier_newton`). The loop stops when
    the certificate over every column meets ``tol``, when the working set is every column and solved
    to ``tol``, or after ``max_iter`` steps or ``MAX_ROUNDS`` rounds.

    One implementation for every provider: traced into the graph for a dense tensor, run eagerly (a
    Python loop, each pass a reduction over chunks) for a streamed one. Public: the vectors only.
    """
    solve = _restricted_solver(objective)
    tol = tf.convert_to_tensor(tol, tf.float64)
    r = tf.shape(start.columns)[0]
    rf = tf.cast(r, tf.float64)
    n = columns.count()
    loose = ~warm & (tf.shape(start.indices)[0] > tf.maximum(3 * r, PRUNE_MIN_POINTS))
    stage_tol = tf.where(loose, tf.maximum(tol, PRUNE_TOL), tol)

    def body(rounds, idx, cols, weights, stage_tol, total, done, fresh, largest, *_):  # _: the last decomposition
        m = tf.shape(idx)[0]
        w_sub = tf.maximum(weights, 1e-12 * rf / tf.cast(m, tf.float64))
        w_sub, its, met, terms = solve(cols, w_sub, stage_tol, tf.maximum(max_iter - total, 1), fresh)
        total = total + its
        # the decomposition at w_sub: the Newton loop's own (in a graph), else computed here, once
        w, V, _, q_work = dual_terms(cols, w_sub, objective) if terms is None else terms

        def complete():  # every column solved to tol: the restricted certificate is the full one
            return idx, cols, w_sub, stage_tol, total, tf.constant(True), fresh, tf.constant(-1.0, tf.float64), w, V

        def another_round():
            scales = inverse_scale(w, objective)
            wmax = tf.reduce_max(w_sub)
            heavy = _indicator(tf.math.top_k(w_sub, k=tf.minimum(2 * r, m)).indices, w_sub)
            keep = tf.where(stage_tol > tol, (w_sub > 1e-3 * wmax) | (q_work > PRUNE_LEVERAGE) | heavy,
                            w_sub > 1e-10 * wmax)
            found = columns.violators(V, scales, tf.boolean_mask(idx, keep), VIOLATOR_CANDIDATES * r)
            whitened = tf.linalg.matmul(V, found.columns, transpose_a=True) * tf.sqrt(scales)[:, None]
            picked = _spread_violators_impl(whitened, r)
            _, rel, _ = duality_gap(w, found.largest[None], w_sub, objective)
            finished = (rel <= tol) | (total >= max_iter)
            fresh = tf.size(picked) == 0  # primal-dual unless violators were just added at a guessed weight
            same = finished | (fresh & tf.reduce_all(keep))  # keep solving the same set (to tol now)
            def grown():  # the kept columns and the violators, in index order (as every pass sums them)
                new_idx = tf.concat([tf.boolean_mask(idx, keep), tf.gather(found.indices, picked)], 0)
                order = tf.argsort(new_idx, stable=True)
                return (tf.gather(new_idx, order), tf.gather(tf.concat(
                    [tf.boolean_mask(cols, keep, axis=1), tf.gather(found.columns, picked, axis=1)], 1), order, axis=1),
                    tf.gather(tf.concat([tf.boolean_mask(w_sub, keep), tf.fill(tf.shape(picked), 1e-3 * wmax)], 0),
                              order))

            idx_, cols_, w_ = tf.cond(same, lambda: (idx, cols, w_sub), grown)
            return idx_, cols_, w_, tol, total, finished, fresh, found.largest, w, V

        return (rounds + 1, *tf.cond((m == n) & (stage_tol <= tol) & met, complete, another_round))

    loop_vars = (tf.constant(0), start.indices, start.columns, start.weights, stage_tol, tf.constant(0),
                 tf.constant(False), tf.constant(True), tf.constant(-1.0, tf.float64),
                 tf.zeros([r], tf.float64), tf.zeros([r, r], tf.float64))
    invariants = (tf.TensorShape([]), tf.TensorShape([None]), tf.TensorShape([None, None]), tf.TensorShape([None]),
                  *(tf.TensorShape([]),) * 5, tf.TensorShape([None]), tf.TensorShape([None, None]))
    _, idx, cols, weights, _, total, done, _, largest, w, V = tf.while_loop(
        lambda rounds, *rest: (rounds < MAX_ROUNDS) & ~rest[-5], body, loop_vars, shape_invariants=invariants)
    # the pass and the decomposition describe the returned working set only if the loop ended on them (a loop
    # cut short by MAX_ROUNDS may have grown the set after its last pass)
    largest = tf.where(done, largest, tf.constant(-1.0, tf.float64))
    return WorkingSet(idx, cols, weights), total, largest, Decomposition(done, w, V)


def cold_start(columns: ColumnProvider, rank: tf.Tensor, objective: str) -> WorkingSet:
    """The provider's start set, every weight the dual's minimiser over equal weights."""
    idx, cols = columns.start(rank)
    return WorkingSet(idx, cols, tf.fill(tf.shape(idx), uniform_weight(cols, objective)))


class Solution(NamedTuple):
    """A certified solve: the working set (its weights the dual solution), the feasible covariance's
    eigenvectors and scales, the duality gap, the relative gap and the Newton steps."""

    work: WorkingSet
    eigenvectors: tf.Tensor
    scales: tf.Tensor
    gap: tf.Tensor
    relative_gap: tf.Tensor
    iterations: tf.Tensor


class Decomposition(NamedTuple):
    """The eigen-decomposition ``(w, V)`` of ``S`` at a working set's weights, as the working-set loop last
    computed it, and whether it is of the set the loop returned (``valid``)."""

    valid: tf.Tensor  #: [] bool
    w: tf.Tensor  #: [r]
    V: tf.Tensor  #: [r, r]


def _certify(columns: ColumnProvider, work: WorkingSet, objective: str, largest: Optional[tf.Tensor] = None,
             known: Optional[Decomposition] = None):
    """The feasible covariance ``M(l) * max q`` of the working set's weights and its certificate over
    every column of ``columns``: one pass unless ``largest`` (``max_i q_i`` over these columns at these
    weights, or negative: unknown) is given; the decomposition of ``S`` is ``known``'s where valid (the
    same numbers: the loop's decomposition at the same weights)."""
    if known is None:
        w, V, _, _ = dual_terms(work.columns, work.weights, objective)
    else:
        w, V = tf.cond(known.valid, lambda: (known.w, known.V),
                       lambda: tuple(dual_terms(work.columns, work.weights, objective)[:2]))

    def full_pass():
        return columns.violators(V, inverse_scale(w, objective), work.indices[:0], tf.constant(0)).largest

    largest = full_pass() if largest is None else tf.cond(largest >= 0.0, lambda: largest, full_pass)
    gap, rel, qmax = duality_gap(w, largest[None], work.weights, objective)
    return V, feasible_scales(w, qmax, objective), gap, rel


def _dense_rounds(members, vectors, dense_points, idx, cols, weights, warm, tol, max_iter, objective):
    """:func:`solve_on_working_sets` over a :class:`DenseColumns` given by its tensors (compiled in
    :data:`DENSE_ROUNDS`): the working set's tensors, the Newton steps, ``max_i q_i`` (or -1) and the
    :class:`Decomposition`'s tensors."""
    work, steps, largest, known = solve_on_working_sets(DenseColumns.held(members, vectors, dense_points),
                                                        WorkingSet(idx, cols, weights), warm, objective, tol, max_iter)
    return (*work, steps, largest, *known)


_INDEX_SPEC = tf.TensorSpec([None], tf.int32)
#: The working-set loop over dense columns, compiled per objective: :func:`solve_noise` runs it twice in a
#: graph (the distinct columns, then every column if the merge was too coarse), one traced body for both.
DENSE_ROUNDS = compile_per_objective(_dense_rounds, [_INDEX_SPEC, MATRIX_SPEC, COUNT_SPEC, _INDEX_SPEC, MATRIX_SPEC,
                                                     VECTOR_SPEC, tf.TensorSpec([], tf.bool), REAL_SPEC, COUNT_SPEC],
                                     SHARED_BODY)


def _rounds(columns: ColumnProvider, start: WorkingSet, warm: tf.Tensor, objective: str, tol: tf.Tensor,
            max_iter: tf.Tensor):
    """:func:`solve_on_working_sets`; over dense columns in a graph, the compiled :data:`DENSE_ROUNDS`."""
    if not isinstance(columns, DenseColumns) or tf.executing_eagerly():
        return solve_on_working_sets(columns, start, warm, objective, tol, max_iter)
    idx, cols, weights, steps, largest, *known = DENSE_ROUNDS[objective](
        columns.members, columns.vectors, tf.convert_to_tensor(columns.dense_points, tf.int32), *start,
        tf.convert_to_tensor(warm, tf.bool), tf.convert_to_tensor(tol, tf.float64),
        tf.convert_to_tensor(max_iter, tf.int32))
    return WorkingSet(idx, cols, weights), steps, largest, Decomposition(*known)


def solve_noise(distinct: ColumnProvider, every: ColumnProvider, start: WorkingSet, warm: tf.Tensor, objective: str,
                tol: tf.Tensor, max_iter: tf.Tensor, same: Any = False) -> Solution:
    """The optimiser's dual solution over the columns of ``every``, solved over one representative of
    each group of identical columns (``distinct``: identical columns carry identical constraints) and
    certified over all (so the merge is safe even where it is only approximate); if the merge was too
    coarse for ``tol``, all columns are solved again from a cold start. ``same`` (a bool, or a scalar bool
    tensor): ``distinct`` holds every column, in ``every``'s order (the loop's last pass then certifies).
    The certificate reads the loop's last decomposition of ``S`` (the same numbers as decomposing again).
    One implementation for every provider. Public: the vectors only.
    """
    work, steps, largest, known = _rounds(distinct, start, warm, objective, tol, max_iter)
    V, scales, gap, rel = _certify(every, work, objective, tf.where(same, largest, -1.0), known)

    def all_columns():
        rank = tf.shape(start.columns)[0]
        more_work, more, more_largest, more_known = _rounds(every, cold_start(every, rank, objective),
                                                            tf.constant(False), objective, tol, max_iter - steps)
        return (*more_work, steps + more, *_certify(every, more_work, objective, more_largest, more_known))

    refit = (rel > tol) & (distinct.count() < every.count()) & (steps < max_iter)
    idx, cols, weights, steps, V, scales, gap, rel = tf.cond(
        refit, all_columns, lambda: (*work, steps, V, scales, gap, rel))
    return Solution(WorkingSet(idx, cols, weights), V, scales, gap, rel, steps)
